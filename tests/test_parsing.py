"""§6.3's pieces: trees read, cleaned and linearized losslessly; EVALB-rule F1 on hand-made trees with known
precision and recall; any decoder output repaired into a tree; constrained decoding always a tree with one leaf per
word; the baselines' scores; bad input (malformed trees, no treebank, empty sentences) refused."""

import random
import zipfile

import pytest
import torch

from transformer.decoding import translate_ids
from transformer.model import Transformer, TransformerConfig
from transformer.parsing import TreeConstraint, Vocab, parse, parsing_pairs, repair, word_class
from transformer.treebank import (PTB_DIR_ENV, TreeError, clean, delinearize, evalb, flat_tree, linearize, parse_trees,
                                  right_branching, treebank_splits, words_and_tags)

GOLD = "( (S (NP-SBJ (DT The) (JJ old) (NN man)) (VP (VBD gave) (NP (PRP her)) (NP (DT a) (NN book))) (. .)) )"


def tree(text: str):
    return clean(parse_trees(text)[0])


def test_linearization_round_trip():
    t = tree(GOLD)
    words = [w for w, _ in words_and_tags(t)]
    assert words == ["The", "old", "man", "gave", "her", "a", "book", "."]
    lin = linearize(t)
    assert lin[:3] == ["(S", "(NP", "XX"] and lin.count("XX") == 8 and lin[-1] == ")S"
    assert linearize(delinearize(lin, words)) == lin


def test_cleaning_removes_traces_and_function_tags():
    t = tree("( (S (NP-SBJ-1 (NNP John)) (VP (VBD left) (NP (-NONE- *T*-1))) (-LRB- -LRB-)) )")
    assert t == ("S", [("NP", [("NNP", ["John"])]), ("VP", [("VBD", ["left"])]), ("-LRB-", ["-LRB-"])])


@pytest.mark.parametrize("test, precision, recall", [
    (GOLD, 100.0, 100.0),
    # one bracket wrong (NP over "her a book" instead of two NPs): test has S NP VP NP, gold S NP VP NP NP
    ("(S (NP (DT The) (JJ old) (NN man)) (VP (VBD gave) (NP (PRP her) (DT a) (NN book))) (. .))", 75.0, 60.0),
    # flat: only S matches
    ("(S (DT The) (JJ old) (NN man) (VBD gave) (PRP her) (DT a) (NN book) (. .))", 100.0, 20.0),
    # the full stop attached elsewhere changes nothing (punctuation is not counted)
    ("(S (NP (DT The) (JJ old) (NN man)) (VP (VBD gave) (NP (PRP her)) (NP (DT a) (NN book)) (. .)))", 100.0, 100.0),
])
def test_f1_on_known_cases(test, precision, recall):
    scores = evalb([tree(GOLD)], [tree(test)])
    assert scores["precision"] == pytest.approx(precision) and scores["recall"] == pytest.approx(recall)
    assert scores["f1"] == pytest.approx(2 * precision * recall / (precision + recall))


def test_prt_counts_as_advp_and_sentences_must_align():
    gold = tree("(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))))")
    assert evalb([gold], [tree("(S (NP (PRP He)) (VP (VBD gave) (ADVP (RB up))))")])["f1"] == 100.0
    with pytest.raises(ValueError, match="1 gold trees but 2 test trees"):
        evalb([gold], [gold, gold])
    with pytest.raises(ValueError, match="the tree has 2 words, the gold tree 3"):
        evalb([gold], [tree("(S (NP (PRP He)) (VP (VBD gave)))")])


def test_repair_makes_any_output_a_tree():
    rng = random.Random(0)
    vocab = ["(S", ")S", "(NP", ")NP", "(VP", ")VP", "XX", "<unk>"]
    for _ in range(500):
        tokens, n = [rng.choice(vocab) for _ in range(rng.randint(0, 30))], rng.randint(1, 12)
        fixed = repair(tokens, n)
        assert fixed.count("XX") == n
        assert linearize(delinearize(fixed, ["w"] * n)) == fixed  # one closed, well-formed tree
    good = linearize(tree(GOLD))
    assert repair(good, 8) == good


@pytest.mark.parametrize("text, message", [
    ("(S (NP (DT The))", "left open"), ("(S (NP (DT The))))", "closes nothing"), ("(S (NP) (VP (V x)))", "empty"),
    ("x (S (NP (DT a)))", "outside any bracket")])
def test_malformed_tree_is_one_clear_error(text, message):
    with pytest.raises(TreeError, match=message):
        parse_trees(text)


def test_missing_or_empty_treebank_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv(PTB_DIR_ENV, str(tmp_path))
    with pytest.raises(TreeError, match="no treebank.zip in"):
        treebank_splits()
    with zipfile.ZipFile(tmp_path / "treebank.zip", "w") as z:
        z.writestr("treebank/README", "nothing parsed here")
    with pytest.raises(TreeError, match="SHA-256"):  # not the sample: refused before it is read
        treebank_splits()


def test_vocab_maps_rare_tokens_to_unk():
    v = Vocab([["a", "b", "a"]], min_count=2)
    assert v.encode(["a", "b", "zzz"]) == [4, 3, 3] and v.decode([0, 1, 2, 4]) == ["<pad>", "<s>", "</s>", "a"]


LABELS = Vocab([linearize(tree(GOLD)), ["(PP", "XX", ")PP", "(ADJP", "XX", ")ADJP"]])


def allowed_after(prefix: list[str], n_words: int, limit: int = 100) -> set[str]:
    "The tokens TreeConstraint allows after `prefix` (without <s>) for a sentence of `n_words` words."
    tokens = torch.tensor([[1, *LABELS.encode(prefix)]])
    logits = torch.zeros(1, len(LABELS))
    TreeConstraint(LABELS)(logits, tokens, torch.tensor([[5] * n_words + [2]]), torch.tensor([limit]))
    return set(LABELS.decode(torch.isfinite(logits[0]).nonzero().squeeze(1).tolist()))


def test_constraint_rules():
    opening = {t for t in LABELS.itos if t.startswith("(")}
    assert allowed_after([], 2) == opening                                    # a tree starts with a bracket
    assert allowed_after(["(S"], 2) == opening | {"XX"}                       # nothing to close yet
    assert allowed_after(["(S", "(NP", "XX"], 2) == opening | {"XX", ")NP"}   # only the innermost label closes
    assert allowed_after(["(S", "XX"], 2) == opening | {"XX"}                 # the root waits for the last word
    assert allowed_after(["(S", "(NP", "XX", "XX"], 2) == {")NP"}             # all words placed: no XX, no bracket
    assert allowed_after(["(S", "XX", "XX", ")S"], 2) == {"</s>"}             # and the end only after the root
    assert allowed_after(["(S", "XX"], 2, limit=5) == {"XX"}                  # no room for another bracket
    assert allowed_after(["(S", *["(NP"] * 5], 2) == {"XX"}                   # 6 brackets in a row at most


@pytest.mark.parametrize("beam_size", [1, 3])
def test_constrained_outputs_are_trees_with_one_leaf_per_word(beam_size):
    torch.manual_seed(0)
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=20, tgt_vocab_size=len(LABELS),
                                                          tie_embeddings=False)).eval()
    rng = random.Random(beam_size)
    sources = [[rng.randrange(3, 20) for _ in range(rng.randint(1, 25))] for _ in range(24)]
    for max_extra in (4, 60):  # a tight output limit too: the constraint leaves room to finish
        outputs = translate_ids(model, sources, beam_size, max_extra=max_extra, constrain=TreeConstraint(LABELS))
        for src, out in zip(sources, outputs):
            tokens = LABELS.decode(out)
            assert linearize(delinearize(tokens, ["w"] * len(src))) == tokens  # one closed tree, one XX per word


def test_copied_leaves_are_the_source_words_in_order():
    torch.manual_seed(0)
    n_labels = len(LABELS)  # one id space past the labels: a leaf's id is its source word's id
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=n_labels + 20,
                                                 tgt_vocab_size=n_labels + 20)).eval()
    rng = random.Random(0)
    sources = [[n_labels + rng.randrange(3, 20) for _ in range(rng.randint(1, 25))] for _ in range(16)]
    for beam_size in (1, 3):
        outputs = translate_ids(model, sources, beam_size, max_extra=60, constrain=TreeConstraint(LABELS))
        for src, out in zip(sources, outputs):
            assert [i for i in out if i >= n_labels] == src
            tokens = LABELS.decode([i if i < n_labels else LABELS.stoi["XX"] for i in out])
            assert linearize(delinearize(tokens, ["w"] * len(src))) == tokens


def test_a_copied_leaf_is_scored_as_any_word():
    n_labels = len(LABELS)  # the model spreads the leaf over many words: the forced word gets their total
    logits = torch.full((1, n_labels + 10), -50.0)
    logits[0, n_labels:] = 0.0                          # ten words equally likely: log 10 for "a word comes"
    logits[0, LABELS.stoi["(NP"]] = 1.0                 # a bracket, likelier than any one word but not than all ten
    tokens = torch.tensor([[1, *LABELS.encode(["(S"])]])
    TreeConstraint(LABELS)(logits, tokens, torch.tensor([[n_labels + 7, n_labels + 8, 2]]), torch.tensor([100]))
    assert logits[0, n_labels + 7].item() == pytest.approx(torch.tensor(10.0).log().item())
    assert logits.argmax().item() == n_labels + 7 and torch.isinf(logits[0, n_labels + 8])


def test_after_the_last_copied_word_the_end_keeps_its_own_score():
    n_labels = len(LABELS)  # the source's next id is then </s>: it must not get the words' total
    logits = torch.zeros((1, n_labels + 10))
    logits[0, LABELS.stoi["</s>"]] = -3.0
    tokens = torch.tensor([[1, *LABELS.encode(["(S"]), n_labels + 7, *LABELS.encode([")S"])]])
    TreeConstraint(LABELS)(logits, tokens, torch.tensor([[n_labels + 7, 2]]), torch.tensor([100]))
    assert logits[0, LABELS.stoi["</s>"]].item() == -3.0 and torch.isfinite(logits).sum() == 1


def test_parsing_pairs_share_one_id_space_when_copying():
    gold = tree(GOLD)
    words = Vocab([[w for w, _ in words_and_tags(gold)]])
    src, tgt = parsing_pairs([gold], words, LABELS, copy_words=True)[0]
    assert src == [len(LABELS) + i for i in words.encode([w for w, _ in words_and_tags(gold)])]
    assert [i for i in tgt if i >= len(LABELS)] == src  # each leaf is its word's source id
    assert parsing_pairs([gold], words, LABELS)[0][0] == words.encode([w for w, _ in words_and_tags(gold)])


def test_parse_refuses_empty_sentences():
    model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=10, tgt_vocab_size=len(LABELS),
                                                          tie_embeddings=False))
    with pytest.raises(ValueError, match="at least one word"):
        parse(model, Vocab([["a"]]), LABELS, [["a"], []])


def test_parse_refuses_a_model_of_other_vocabularies():
    words = Vocab([["a", "b"]])
    for src, tgt in [(len(words) + 1, len(LABELS)), (len(LABELS) + len(words), len(LABELS) + len(words) + 1)]:
        model = Transformer(TransformerConfig.preset("tiny", src_vocab_size=src, tgt_vocab_size=tgt,
                                                     tie_embeddings=False))
        with pytest.raises(ValueError, match="do not match these words and labels"):
            parse(model, words, LABELS, [["a"]])


def test_baselines_score_as_expected():
    gold = tree(GOLD)  # S NP VP NP NP over 7 counted words
    words = [w for w, _ in words_and_tags(gold)]
    assert evalb([gold], [flat_tree(words)])["f1"] == pytest.approx(2 * 100 * 20 / 120)  # S alone: P 100, R 20
    assert right_branching(["a"]) == ("S", [("XX", ["a"])])
    # (S The (NP old (NP man (NP gave (NP her (NP a (NP book .))))))): of its 7 brackets S(0,7) and NP(5,7) match
    assert evalb([gold], [right_branching(words)])["precision"] == pytest.approx(100 * 2 / 7)


def test_rare_words_fall_back_to_their_class():
    assert word_class("Filing") == "<unk-Cap-ing>" and word_class("1\\/2") == "<unk-num>"
    v = Vocab([["the", "the", "quickly"]], min_count=2, fallback=word_class)
    assert v.decode(v.encode(["the", "slowly", "Ms."])) == ["the", "<unk-low-ly>", "<unk>"]  # no class seen: <unk>
