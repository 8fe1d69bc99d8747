"""GLUE: its tasks and files (`tasks`), scores (`metrics`), prediction files (`predictions`)."""
