// For tests/test_web.py: read {"tokenizer": path, "texts": [...], "ids": [[...]]} on stdin and print
// {"ids": ids of each text, "texts": text of each id list, "sentences": ids of each text cleaned as a sentence to
// translate} from the page's JavaScript tokenizer.
const fs = require("fs");
const path = require("path");
const { BpeTokenizer } = require(path.join(__dirname, "..", "_extra", "translate", "tokenizer.js"));

const job = JSON.parse(fs.readFileSync(0, "utf-8"));
const tokenizer = new BpeTokenizer(JSON.parse(fs.readFileSync(job.tokenizer, "utf-8")));
process.stdout.write(JSON.stringify({ ids: job.texts.map((t) => tokenizer.encode(t)),
                                      texts: job.ids.map((ids) => tokenizer.decode(ids)),
                                      sentences: job.texts.map((t) => tokenizer.encodeSentence(t)) }));
