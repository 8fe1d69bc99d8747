"""bertcore: the library behind the pipeline, in five parts and the utilities they share.

    data/        what the stages before training write: corpus/ (raw text -> sentences),
                 vocab/ (WordPiece), samples/ (NSP pairs as arrays)
    model/       BERT itself, its inits, the classifier, Hugging Face import and export
    saved/       the model on disk: the folder pretraining writes, the run that wrote it
    training/    pretraining: config, masking and batches, one step, the loop, checkpoints
                 and resuming, the time budget, evaluation, processes
    downstream/  what uses a pretrained model: fine-tuning on a task, pruning heads
    common/      errors, atomic outputs, locks, fingerprints, devices, MLflow tracking

Imports point one way: common <- data <- model <- saved <- training <- downstream. The
library knows nothing of params.yaml or of the pipeline's folders: the `bertstages` package
turns params into the typed config objects defined here and passes them in. ARCHITECTURE.md
has the whole map.
"""
