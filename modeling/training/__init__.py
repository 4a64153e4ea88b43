"""Training Vaswani models from scratch with Hugging Face Accelerate (`scripts/train.py`), one module per job:

    arguments       the options, from an experiment config file and the command line
    synthetic       the toy English -> German task the project writes itself (no download)
    seq2seq_data    loading, tokenizing (cached `datasets.map`) and filtering source/target pairs
    batching        batches under a token budget, bucketed by length, shared among processes
    optimization    Adam and the paper's inverse-square-root schedule with warmup
    preparation     the output folder, the tokenizer and the model, before the first update
    checkpoints     atomic full checkpoints without pickles to load, resuming, published `best/` and `last/` models
    validation      validation loss and the scores (sacreBLEU, tokenized BLEU / ROUGE) of beam-search outputs
    reporting       metrics as JSON Lines, the training-curves PNG, the closing summary
    state           what a run works with (`Run`) and where it is (`TrainingProgress`, recorded in each checkpoint)
    engine          the run set up on Accelerate's engine, checked against what was asked (precision, FSDP, DeepSpeed)
    resuming        --resume: the newest checkpoint the run can continue from exactly, and the checks before it
    update          one optimizer update (micro-batches weighted by their tokens, clipping) and its finiteness checks
    finite          whether tensors hold inf or nan, without a kernel per tensor (update's and cuda_graphs' check)
    loop            the training loop that puts them together
    command         the `vaswani-train` command (scripts/train.py): the options parsed, the run, its end
    cuda_graphs     --cuda_graphs: the updates replayed from CUDA graphs (with --torch_compile, the step too)
    chunked_loss    --chunked_loss: the output layer's loss a chunk of rows at a time, without the batch's logits
    tokenizer       the `vaswani-train-tokenizer` command (scripts/train_tokenizer.py): a vocabulary from dataset columns
    averaging       the `vaswani-average-checkpoints` command (scripts/average_checkpoints.py): a run's last checkpoints
                    averaged into one model
"""
