"""Decoding throughput, side by side in one run, on the test2016 sources: our beam search (beam 4) and greedy
decoding, our greedy decoding without the key-value cache, and Hugging Face's MarianMTModel.generate with the same
dimensions (random weights; `pip install transformers` for it, else it is skipped). Our two searches also run with
one query's attention written out at every key length, to measure `fast_attention`'s rule (the fused kernel below
`BLAS_BMM_MIN_PRODUCTS`) inside a decode.

Every decoder produces exactly `--length` tokens per sentence (end-of-sentence is forbidden until the last step),
so that all do the same number of decoding steps and the comparison is per token. The sources are decoded
`--rounds` times (3 by default); each ratio is the median of its rounds, with its spread.

    python benchmarks/decode_throughput.py
"""

import argparse
import statistics
import time

import torch

import transformer.attention as attention
from common import multi30k_ids, ratio_of_rounds, write_result
from transformer.decoding import beam_search, greedy_decode
from transformer.model import Transformer, TransformerConfig
from transformer.attention import pad_sequences


def our_model(cfg: TransformerConfig) -> Transformer:
    "Our model with `</s>` forbidden, so that every output runs to the length limit (cfg.max_len)."
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    eos = torch.tensor([cfg.eos_id])
    model.generator.register_forward_hook(lambda module, inputs, logits: logits.index_fill_(-1, eos, -1e9))  # in place: no copy of the logits
    return model


def marian(cfg: TransformerConfig):
    "MarianMTModel with our dimensions, or None when `transformers` is not installed."
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError:
        return None
    torch.manual_seed(0)
    return MarianMTModel(MarianConfig(
        vocab_size=cfg.src_vocab_size, decoder_vocab_size=cfg.tgt_vocab_size, d_model=cfg.d_model,
        encoder_layers=cfg.n_encoder_layers, decoder_layers=cfg.n_decoder_layers,
        encoder_attention_heads=cfg.n_heads, decoder_attention_heads=cfg.n_heads, encoder_ffn_dim=cfg.d_ff,
        decoder_ffn_dim=cfg.d_ff, activation_function="relu", max_position_embeddings=cfg.max_len + 2,
        pad_token_id=cfg.pad_id, eos_token_id=cfg.eos_id, decoder_start_token_id=cfg.bos_id, forced_eos_token_id=None,
        scale_embedding=True, share_encoder_decoder_embeddings=True, dropout=0.0)).eval()


def written_out_always(run):
    "`run` with one query's attention written out at every key length, as `fast_attention` did before its rule."
    def wrapped(batch):
        rule, attention.BLAS_BMM_MIN_PRODUCTS = attention.BLAS_BMM_MIN_PRODUCTS, 0
        try:
            return run(batch)
        finally:
            attention.BLAS_BMM_MIN_PRODUCTS = rule
    return wrapped


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@torch.no_grad()
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--length", type=int, default=30, help="output tokens per sentence")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--sentences", type=int, default=1000, help="how many test2016 sources")
    parser.add_argument("--rounds", type=int, default=3, help="passes over the sources; ratios: median and spread")
    args = parser.parse_args()
    if args.rounds < 3:
        parser.error("--rounds must be at least 3: the ratios need a median and a spread")

    tokenizer, _, test = multi30k_ids()
    V, L = tokenizer.get_vocab_size(), args.length
    sources = sorted((x[: L - 1] for x, _ in test[: args.sentences]), key=len)  # ≤ L tokens with </s>
    cfg = TransformerConfig.preset(args.preset, src_vocab_size=V, tgt_vocab_size=V, max_len=L)
    ours, hf = our_model(cfg), marian(cfg)
    batches = [pad_sequences([[*x, cfg.eos_id] for x in sources[k : k + args.batch_size]], cfg.pad_id)
               for k in range(0, len(sources), args.batch_size)]

    runs = {"ours, beam 4": lambda b: beam_search(ours, b, beam_size=4, alpha=0.6, max_extra=L),
            "ours, greedy": lambda b: greedy_decode(ours, b, max_extra=L),
            "ours, greedy without cache": lambda b: greedy_decode(ours, b, max_extra=L, use_cache=False)}
    runs |= {f"{name}, written out at every length": written_out_always(runs[name])
             for name in ("ours, beam 4", "ours, greedy")}
    if hf is not None:
        for name, beams in (("HF Marian, beam 4", 4), ("HF Marian, greedy", 1)):
            runs[name] = lambda b, beams=beams: hf.generate(
                input_ids=b, attention_mask=(b != cfg.pad_id).long(), num_beams=beams, do_sample=False,
                max_new_tokens=L, min_new_tokens=L, early_stopping=False)
    check = runs["ours, greedy"](batches[0])
    assert all(len(y) == L - 1 for y in check), "outputs must run to the length limit"
    per_round = []
    for _ in range(args.rounds):
        seconds = dict.fromkeys(runs, 0.0)
        for b in batches:  # interleaved, batch by batch
            for name, run in runs.items():
                seconds[name] += timed(lambda: run(b))
        per_round.append(seconds)
    seconds = {k: statistics.median(r[k] for r in per_round) for k in runs}
    n = len(sources)
    rows = [{"decoder": k, "sentences_per_s": round(n / s, 2), "tokens_per_s": round(n * L / s, 1), "seconds": round(s, 2)}
            for k, s in seconds.items()]

    ratios = {"greedy_cached_vs_uncached": ratio_of_rounds(per_round, "ours, greedy without cache",
                                                           "ours, greedy")}
    for search in ("beam 4", "greedy"):  # the one-query rule against writing out at every length
        ratios[f"{search.replace(' ', '')}_one_query_rule_vs_written_out"] = ratio_of_rounds(
            per_round, f"ours, {search}, written out at every length", f"ours, {search}")
    if hf is not None:
        ratios["beam4_vs_hf_marian"] = ratio_of_rounds(per_round, "HF Marian, beam 4", "ours, beam 4")
        ratios["greedy_vs_hf_marian"] = ratio_of_rounds(per_round, "HF Marian, greedy", "ours, greedy")
    print(f"{n} test2016 sources, {L} output tokens each, batches of {args.batch_size}, preset {args.preset}")
    for r in rows:
        print(f"{r['decoder']:30}{r['sentences_per_s']:>10.2f} sentences/s{r['tokens_per_s']:>12,.1f} tokens/s")
    print("ratios (median, spread):", {k: (r["median"], r["spread"]) for k, r in ratios.items()})
    path = write_result("decode_throughput", {"preset": args.preset, "length": L, "batch_size": args.batch_size,
                                              "sentences": n, "hf_marian": hf is not None, "rows": rows, "ratios": ratios})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
