"""The list-sorting study: head modes, copy suppression, the LLC over training, data features."""
