"""The pipeline's stages: one thin module per DVC stage plus the `bert` click group."""
