"""End to end: the tiny model learns to copy sequences, and greedy decoding reproduces unseen ones exactly."""

from transformer.copy_task import copy_pairs, exact_match, train_copy_model


def test_copy_task_reaches_perfect_exact_match():
    """400 steps of training (fixed seed) copy 500 unseen sequences exactly (greedy; beam search on 100 too)."""
    model, metrics = train_copy_model()
    assert not model.training
    assert metrics[-1]["step"] == 400
    assert metrics[-1]["valid_loss"] < metrics[0]["valid_loss"]
    test = copy_pairs(500, seed=2)  # the training pairs use seed 0 and the validation pairs seed 1
    assert exact_match(model, test) == 1.0
    assert exact_match(model, test[:100], beam_size=4) == 1.0
