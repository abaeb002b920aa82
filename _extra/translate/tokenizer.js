// The book's tokenizer in JavaScript: byte-level BPE exactly as the Python `tokenizers` library runs the
// tokenizer.json that transformer.data.train_bpe writes (no normalizer, GPT-2's word split, BPE merges by rank,
// byte-level decoding). tests/test_web.py compares its ids and texts with Python's on Multi30k and odd characters;
// tests/test_user_text.py checks that a sentence is cleaned before encoding as transformer.data.clean_sentence does.
(function (root) {
  "use strict";

  // GPT-2's table from the 256 byte values to printable characters: bytes that print stand for themselves,
  // the others (controls, space, ...) get the characters from U+0100 on, in byte order.
  function byteCharacters() {
    const printable = [];
    for (let b = 33; b <= 126; b++) printable.push(b);
    for (let b = 161; b <= 172; b++) printable.push(b);
    for (let b = 174; b <= 255; b++) printable.push(b);
    const table = new Array(256);
    printable.forEach((b) => { table[b] = String.fromCodePoint(b); });
    let next = 256;
    for (let b = 0; b < 256; b++) if (table[b] === undefined) table[b] = String.fromCodePoint(next++);
    return table;
  }

  // GPT-2's split into words, numbers, punctuation runs and spaces, as `tokenizers` writes it. Its \s is
  // Unicode's White_Space (which, unlike JavaScript's \s, holds U+0085 and not U+FEFF), so it is spelled out.
  const WORDS = new RegExp("'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+" +
                           "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+", "gu");

  // A sentence as every engine tokenizes it (transformer.data.clean_sentence): Unicode NFC, without white space or
  // BOMs at its ends. Python's \s also holds U+001C–U+001F and U+0085 (JavaScript's holds U+FEFF): both are here.
  const EDGE_SPACE = /^[\s\u001c-\u001f\u0085]+|[\s\u001c-\u001f\u0085]+$/gu;

  function cleanSentence(text) {
    return text.normalize("NFC").replace(EDGE_SPACE, "");
  }

  class BpeTokenizer {
    // `spec`: the parsed tokenizer.json; anything but the settings train_bpe uses is refused, not guessed.
    constructor(spec) {
      const model = spec.model, pre = spec.pre_tokenizer, dec = spec.decoder;
      const supported = model.type === "BPE" && !model.dropout && model.unk_token == null &&
        !model.continuing_subword_prefix && !model.end_of_word_suffix && !model.byte_fallback &&
        !model.ignore_merges && spec.normalizer == null && spec.post_processor == null &&
        pre && pre.type === "ByteLevel" && !pre.add_prefix_space && pre.use_regex && dec && dec.type === "ByteLevel";
      if (!supported) throw new Error("tokenizer.json is not a byte-level BPE as transformer.data.train_bpe makes it");
      this.vocab = new Map(Object.entries(model.vocab));                 // token → id
      this.tokens = [];                                                  // id → token
      for (const [token, id] of this.vocab) this.tokens[id] = token;
      this.ranks = new Map();                                            // "left right" → merge rank
      model.merges.forEach((m, rank) => this.ranks.set(Array.isArray(m) ? m.join(" ") : m, rank));
      this.special = new Set(spec.added_tokens.filter((t) => t.special).map((t) => t.id));
      this.byteChar = byteCharacters();
      this.charByte = new Map(this.byteChar.map((c, b) => [c, b]));
      this.cache = new Map();
    }

    // One word's pieces: start from its characters, then merge the adjacent pair of lowest rank (the leftmost
    // of equals) until no pair is a merge, as the Rust BPE does.
    bpe(word) {
      if (this.cache.has(word)) return this.cache.get(word);
      let parts = Array.from(word);
      for (;;) {
        let best = -1, bestRank = Infinity;
        for (let i = 0; i + 1 < parts.length; i++) {
          const rank = this.ranks.get(parts[i] + " " + parts[i + 1]);
          if (rank !== undefined && rank < bestRank) { best = i; bestRank = rank; }
        }
        if (best < 0) break;
        parts.splice(best, 2, parts[best] + parts[best + 1]);
      }
      this.cache.set(word, parts);
      return parts;
    }

    // Text → token ids (no <s> or </s>: the decoder adds those).
    encode(text) {
      const ids = [], utf8 = new TextEncoder();
      for (const match of text.matchAll(WORDS)) {
        const word = Array.from(utf8.encode(match[0]), (b) => this.byteChar[b]).join("");
        for (const piece of this.bpe(word)) {
          const id = this.vocab.get(piece);
          if (id !== undefined) ids.push(id);  // as without an unknown token: a piece outside the vocabulary is dropped
        }
      }
      return ids;
    }

    // A sentence typed or read by a user → token ids, cleaned first as every engine cleans it.
    encodeSentence(text) {
      return this.encode(cleanSentence(text));
    }

    // Token ids → text: special tokens skipped, characters mapped back to bytes, bytes read as UTF-8 with
    // U+FFFD for broken sequences (Rust's from_utf8_lossy and TextDecoder replace the same spans).
    decode(ids) {
      const bytes = [];
      for (const id of ids) {
        if (this.special.has(id) || this.tokens[id] === undefined) continue;
        const token = this.tokens[id], chars = Array.from(token);
        if (chars.every((c) => this.charByte.has(c))) chars.forEach((c) => bytes.push(this.charByte.get(c)));
        else bytes.push(...new TextEncoder().encode(token));
      }
      return new TextDecoder("utf-8", { ignoreBOM: true }).decode(new Uint8Array(bytes));  // a BOM stays, as in Rust
    }

    // The text of one token, for labels: the special tokens by name, the others decoded.
    piece(id) {
      return this.special.has(id) ? this.tokens[id] : this.decode([id]);
    }
  }

  root.BpeTokenizer = BpeTokenizer;
  root.cleanSentence = cleanSentence;
  if (typeof module !== "undefined") module.exports = { BpeTokenizer, cleanSentence };
})(typeof window !== "undefined" ? window : globalThis);
