"""Word pools the prompt renderers draw surface names from (symbols stay abstract until rendered)."""

from __future__ import annotations

import builtins
import keyword
from itertools import product
from string import ascii_uppercase

# Single letters first; two-letter names only when a question needs more than 26 variables.
LETTERS = tuple(ascii_uppercase)
LETTER_PAIRS = tuple(a + b for a, b in product(ascii_uppercase, repeat=2))

# Lower-case consonant-vowel-consonant identifiers that are not Python keywords or builtins.
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"
IDENTIFIERS = tuple(
    name
    for name in ("".join(p) for p in product(_CONSONANTS, _VOWELS, _CONSONANTS))
    if not keyword.iskeyword(name) and not hasattr(builtins, name)
)

COLOURS = ("red", "blue", "green", "yellow", "black", "white", "purple", "orange", "grey", "brown", "pink",
           "silver")
CONTAINERS = ("box", "bag", "basket", "jar", "chest", "drawer", "bucket", "crate", "tin", "pouch", "case",
              "barrel")
OBJECTS = tuple(f"{colour} {container}" for colour, container in product(COLOURS, CONTAINERS))
ROOMS = ("kitchen", "attic", "cellar", "garage", "bedroom", "bathroom", "hallway", "library", "study",
         "pantry", "nursery", "office", "laundry", "porch", "garden", "basement", "dining room", "living room",
         "guest room", "workshop", "studio", "greenhouse", "balcony", "closet")

PEOPLE = (
    "Alice", "Harry", "Oliver", "Emma", "Liam", "Sophia", "Noah", "Mia", "Lucas", "Chloe", "Ethan", "Grace",
    "Mason", "Lily", "Logan", "Zoe", "Jacob", "Ruby", "Henry", "Ella", "Jack", "Ivy", "Leo", "Nora",
    "Owen", "Hazel", "Finn", "Clara", "Theo", "Alma", "Felix", "Iris", "Hugo", "Vera", "Oscar", "Rose",
    "Arthur", "Stella", "Milo", "Daisy", "Jasper", "Maya", "Rufus", "Edith", "Silas", "Greta", "Ivan", "Lena",
    "Victor", "Nina", "Walter", "Paula", "Xavier", "Tessa", "Yusuf", "Wanda", "Zane", "Bianca", "Caleb", "Diana",
    "Dorian", "Esther", "Frank", "Fiona", "George", "Helen", "Isaac", "Julia", "Kevin", "Karen", "Louis", "Mabel",
    "Martin", "Olga", "Peter", "Quinn", "Ralph", "Sarah", "Tobias", "Ursula", "Vincent", "Willa", "Boris", "Agnes",
    "Cyril", "Beatrice", "Damian", "Celia", "Edgar", "Dora", "Gavin", "Elsie", "Howard", "Flora", "Jonah", "Gwen",
    "Kurt", "Hilda", "Lionel", "Irene", "Marcus", "Joan", "Nigel", "Kira", "Otto", "Lorna", "Percy", "Miriam",
    "Reuben", "Nell", "Simon", "Opal", "Trevor", "Pearl", "Ulrich", "Rita", "Vernon", "Sybil", "Wesley", "Thea",
)
WOMEN = (
    "Alice", "Emma", "Sophia", "Mia", "Chloe", "Grace", "Lily", "Zoe", "Ruby", "Ella", "Ivy", "Nora", "Hazel",
    "Clara", "Alma", "Iris", "Vera", "Rose", "Stella", "Daisy", "Maya", "Edith", "Greta", "Lena", "Nina",
    "Paula", "Tessa", "Wanda", "Bianca", "Diana", "Esther", "Fiona", "Helen", "Julia", "Karen", "Mabel", "Olga",
    "Sarah", "Ursula", "Willa", "Agnes", "Beatrice", "Celia", "Dora", "Elsie", "Flora", "Gwen", "Hilda", "Irene",
    "Joan", "Kira", "Lorna", "Miriam", "Nell", "Opal", "Pearl", "Rita", "Sybil", "Thea", "Anna", "Bella",
    "Cora", "Delia", "Eva", "Freya", "Gloria", "Hannah", "Ingrid", "Jane", "Laura", "Maria", "Naomi", "Olive",
    "Petra", "Rachel", "Selma", "Tara", "Una", "Violet", "Wendy",
)
PLACES = (
    "Wonderland", "Avalon", "Camelot", "Atlantis", "Eldorado", "Narnia", "Lilliput", "Shangri-La", "Utopia",
    "Arcadia", "Xanadu", "Oz", "Gondor", "Rohan", "Mordor", "Hogsmeade", "Riverdale", "Springfield", "Gotham",
    "Metropolis", "Smallville", "Bedrock", "Hobbiton", "Brigadoon", "Erewhon", "Florin", "Genovia", "Latveria",
    "Wakanda", "Zamunda", "Arendelle", "Agrabah", "Neverland", "Oceania", "Ruritania", "Sodor", "Tatooine",
    "Westeros", "Winterfell", "Zenda", "Bree", "Dale", "Esgaroth", "Lothlorien", "Mirkwood", "Numenor",
    "Rivendell", "Isengard", "Laputa", "Balnibarbi", "Glubbdubdrib", "Luggnagg", "Brobdingnag", "Houyhnhnm",
    "Islandia", "Panem", "Terabithia", "Prydain", "Earthsea", "Lankhmar",
)
