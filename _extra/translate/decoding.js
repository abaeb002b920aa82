// Greedy decoding and beam search around the two ONNX graphs of `transformer export --format onnx`, following
// transformer.decoding step for step: the same output limit, the same tokens ruled out, GNMT's length penalty
// and the same stopping rule, so that the page's translations are the package's.
(function (root) {
  "use strict";

  const lengthPenalty = (length, alpha) => Math.pow((5 + length) / 6, alpha);  // ((5 + |y|) / 6)^α

  class OnnxTranslator {
    // `ort`: onnxruntime-web; `encoder`, `step`: its sessions; `config`: the model's config.json.
    constructor(ort, encoder, step, config) {
      Object.assign(this, { ort, encoder, step, config });
    }

    // Source ids (without </s>) → the cross-attention keys and values of every decoder layer, (L, 1, h, S, d).
    async encode(srcIds) {
      const src = [...srcIds, this.config.eos_id];
      const ids = new this.ort.Tensor("int64", BigInt64Array.from(src, BigInt), [1, src.length]);
      const out = await this.encoder.run({ src: ids });
      return { src, crossK: out.cross_k, crossV: out.cross_v };
    }

    // Rows of `tensor` along its second axis (the batch axis of the caches), in the order `rows`.
    pick(tensor, rows) {
      const [L, B, ...rest] = tensor.dims, size = rest.reduce((a, b) => a * b, 1), data = tensor.data;
      const out = new Float32Array(L * rows.length * size);
      for (let l = 0; l < L; l++) {
        rows.forEach((r, i) => out.set(data.subarray((l * B + r) * size, (l * B + r + 1) * size),
                                       (l * rows.length + i) * size));
      }
      return new this.ort.Tensor("float32", out, [L, rows.length, ...rest]);
    }

    // One decoder step for the last token of each row: logits (rows × V), the grown caches, and the new tokens'
    // cross-attention (L, rows, h, 1, S).
    async decodeStep(tokens, memory, cache) {
      const n = tokens.length, S = memory.src.length;
      const feeds = {
        tokens: new this.ort.Tensor("int64", BigInt64Array.from(tokens, BigInt), [n, 1]),
        src_mask: new this.ort.Tensor("bool", new Uint8Array(n * S).fill(1), [n, S]),
        cross_k: this.pick(memory.crossK, new Array(n).fill(0)),  // the sentence's keys and values, once per row
        cross_v: this.pick(memory.crossV, new Array(n).fill(0)),
        self_k: cache.k, self_v: cache.v,
      };
      const out = await this.step.run(feeds);
      return { logits: out.logits.data, cache: { k: out.new_self_k, v: out.new_self_v }, cross: out.cross_attn };
    }

    // An empty cache for `n` rows: (L, n, h, 0, d).
    emptyCache(memory, n) {
      const [L, , h, , d] = memory.crossK.dims;
      const empty = () => new this.ort.Tensor("float32", new Float32Array(0), [L, n, h, 0, d]);
      return { k: empty(), v: empty() };
    }

    // Most output tokens (</s> included): the source's length with </s> plus `maxExtra`, within the model's context.
    limit(memory, maxExtra) {
      return Math.min(memory.src.length + maxExtra, this.config.max_len);
    }

    // Rule out <pad> and <s>, and every token but </s> once the limit is reached (restrict_logits_).
    restrict(row, forceEnd) {
      const { pad_id, bos_id, eos_id } = this.config;
      row[pad_id] = row[bos_id] = -Infinity;
      if (forceEnd) { const eos = row[eos_id]; row.fill(-Infinity); row[eos_id] = eos; }
      return row;
    }

    // The most probable allowed token at each step (greedy_decode); returns the tokens without specials.
    async greedy(srcIds, maxExtra = 50) {
      const memory = await this.encode(srcIds), limit = this.limit(memory, maxExtra), V = this.config.tgt_vocab_size;
      let cache = this.emptyCache(memory, 1), token = this.config.bos_id;
      const out = [];
      for (let t = 0; t < limit; t++) {
        const step = await this.decodeStep([token], memory, cache);
        cache = step.cache;
        const row = this.restrict(Float64Array.from(step.logits.subarray(0, V)), t + 1 >= limit);
        token = row.indexOf(Math.max(...row));  // the first of equals, as torch.argmax
        if (token === this.config.eos_id) break;
        out.push(token);
      }
      return out;
    }

    // Beam search of `beamSize` hypotheses with GNMT's length penalty α (beam_search for one sentence).
    async beam(srcIds, beamSize = 4, alpha = 0.6, maxExtra = 50) {
      const { eos_id, bos_id, tgt_vocab_size: V } = this.config, K = beamSize;
      const memory = await this.encode(srcIds), limit = this.limit(memory, maxExtra);
      let cache = this.emptyCache(memory, 1), rows = [[bos_id]], scores = [0];
      const finished = [], byValue = (a, b) => b.value - a.value || a.index - b.index;  // descending, first of equals
      for (let t = 0; t < limit; t++) {
        const step = await this.decodeStep(rows.map((r) => r[r.length - 1]), memory, cache);
        const candidates = [], W = Math.min(2 * K, V);
        rows.forEach((_, r) => {
          const logp = this.restrict(logSoftmax(step.logits.subarray(r * V, (r + 1) * V)), t + 1 >= limit);
          // the row's best 2K tokens, and their scores as continuations of the row's hypothesis (in float32)
          const top = topK(logp, W);
          top.forEach((c, j) => candidates.push(
            { value: Math.fround(scores[r] + c.value), index: r * W + j, beam: r, token: c.index }));
        });
        const best = candidates.sort(byValue).slice(0, 2 * K);  // enough to keep K that go on
        best.forEach((c, i) => {  // hypotheses that end among the K best leave the beam
          if (i < K && c.token === eos_id && Number.isFinite(c.value))
            finished.push({ tokens: rows[c.beam].slice(1), score: c.value / lengthPenalty(t + 1, alpha) });
        });
        const kept = best.map((c, i) => ({ ...c, value: c.token === eos_id ? -Infinity : c.value, index: i }))
          .sort(byValue).slice(0, K);
        rows = kept.map((c) => [...rows[c.beam], c.token]);
        scores = kept.map((c) => c.value);
        const beams = kept.map((c) => c.beam);  // each kept hypothesis continues its row's cache
        cache = { k: this.pick(step.cache.k, beams), v: this.pick(step.cache.v, beams) };
        const bestDone = Math.max(-Infinity, ...finished.map((h) => h.score));
        if (bestDone >= Math.max(...scores) / lengthPenalty(limit, alpha) || t + 1 >= limit) break;
      }
      finished.sort((a, b) => b.score - a.score);
      return finished[0].tokens;
    }

    // What each output position attended to: the decoder read <s> and the output (without </s>) one token at a
    // time, every layer's and head's cross-attention kept, [L][h][T][S], as the chapter's maps show them.
    async attention(srcIds, outIds) {
      const memory = await this.encode(srcIds), [L, , h] = memory.crossK.dims, S = memory.src.length;
      const maps = Array.from({ length: L }, () => Array.from({ length: h }, () => []));
      let cache = this.emptyCache(memory, 1);
      for (const token of [this.config.bos_id, ...outIds]) {
        const step = await this.decodeStep([token], memory, cache);
        cache = step.cache;
        for (let l = 0; l < L; l++) for (let k = 0; k < h; k++)
          maps[l][k].push(Array.from(step.cross.data.subarray((l * h + k) * S, (l * h + k + 1) * S)));
      }
      return { src: memory.src, tgt: [this.config.bos_id, ...outIds], maps };
    }
  }

  // The k largest of `values` as {value, index}, largest first, the lower index first among equals (as a stable
  // sort would order them): one pass that keeps a short sorted list.
  function topK(values, k) {
    const best = [];
    for (let index = 0; index < values.length; index++) {
      const value = values[index];
      if (best.length === k && !(value > best[k - 1].value)) continue;
      if (best.length === k) best.pop();
      let at = best.length;
      while (at > 0 && value > best[at - 1].value) at--;
      best.splice(at, 0, { value, index });
    }
    return best;
  }

  // log_softmax of one row of logits, in float32 as PyTorch computes it.
  function logSoftmax(logits) {
    let max = -Infinity, sum = 0;
    for (const x of logits) max = Math.max(max, x);
    for (const x of logits) sum += Math.exp(x - max);
    const shift = max + Math.log(sum);
    return Float64Array.from(logits, (x) => Math.fround(x - shift));
  }

  root.OnnxTranslator = OnnxTranslator;
  if (typeof module !== "undefined") module.exports = { OnnxTranslator, lengthPenalty };
})(typeof window !== "undefined" ? window : globalThis);
