"""Models built on tinygrad that load published weights: `bert` (a Hugging Face BERT encoder) and `wordpiece`
(its tokenizer). docs/models.md says how to use them and how they are checked."""
