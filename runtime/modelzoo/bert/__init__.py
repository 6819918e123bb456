"""bert: BERT pretraining (masked LM + next sentence; RoBERTa with disable_nsp)."""
