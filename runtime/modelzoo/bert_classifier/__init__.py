"""bert_classifier: BERT fine-tuned for sequence (pair) classification (SST-2 / MNLI configs)."""
