"""What the models trained on modular addition do: the Fourier spectrum of their embeddings and logits."""
