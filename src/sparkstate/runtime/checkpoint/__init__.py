"""The checkpoint directory: its storage (local or Hadoop), metadata, lock, run records,
figures, and --fresh."""
