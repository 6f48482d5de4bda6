"""Recipe sweeps over one cell (`headway study recipes`, docs/study-retrieval.md, "Recipes over one cell")."""

from headway.studies.recipes.study import RecipesStudy

__all__ = ["RecipesStudy"]
