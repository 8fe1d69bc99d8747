"""bertcore: the library behind the pipeline: data, model, masking, training, export.

It knows nothing of params.yaml or of the pipeline's folders; the `stages` package turns
params into the typed config objects defined here and passes them in.
"""

__version__ = "0.1.0"
