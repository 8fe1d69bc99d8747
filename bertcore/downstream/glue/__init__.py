"""GLUE: its params section (`config`), its tasks and files (`tasks`), scores (`metrics`),
prediction files (`predictions`)."""
