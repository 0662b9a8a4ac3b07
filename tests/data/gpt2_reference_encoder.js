// An independent GPT-2 encoder in JavaScript, used only by the optional gpt2_xcheck tests
// (run when node is installed): it follows OpenAI's encoder.py / gpt-3-encoder with the JS
// regex engine's \p{L} and \p{N}, so it checks keel's pre-tokenizer and BPE independently.
//   node gpt2_reference_encoder.js VOCAB_DIR TEXT_FILE OUT_FILE
const fs = require('fs');
const [,, vocabDir, textFile, outFile] = process.argv;
const encoder = JSON.parse(fs.readFileSync(vocabDir + '/encoder.json', 'utf8'));
const lines = fs.readFileSync(vocabDir + '/vocab.bpe', 'utf8').split('\n');
const merges = lines.slice(1, lines.length - 1).map(l => l.split(' '));
const ranks = new Map(merges.map((m, i) => [m.join(' '), i]));
const bs = [];
for (let i = 33; i <= 126; i++) bs.push(i);
for (let i = 161; i <= 172; i++) bs.push(i);
for (let i = 174; i <= 255; i++) bs.push(i);
const cs = bs.slice(); let n = 0;
for (let b = 0; b < 256; b++) if (!bs.includes(b)) { bs.push(b); cs.push(256 + n); n++; }
const b2u = {}; bs.forEach((b, i) => b2u[b] = String.fromCodePoint(cs[i]));
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;
const cache = new Map();
function bpe(token) {
  if (cache.has(token)) return cache.get(token);
  let word = Array.from(token);
  while (word.length > 1) {
    let best = null, bestRank = Infinity;
    for (let i = 0; i + 1 < word.length; i++) {
      const r = ranks.get(word[i] + ' ' + word[i + 1]);
      if (r !== undefined && r < bestRank) { bestRank = r; best = [word[i], word[i + 1]]; }
    }
    if (!best) break;
    const out = [];
    for (let i = 0; i < word.length; i++) {
      if (i + 1 < word.length && word[i] === best[0] && word[i + 1] === best[1]) { out.push(best[0] + best[1]); i++; }
      else out.push(word[i]);
    }
    word = out;
  }
  cache.set(token, word);
  return word;
}
const text = fs.readFileSync(textFile, 'utf8');
const ids = [];
for (const m of text.matchAll(pat)) {
  const t = Array.from(Buffer.from(m[0], 'utf8')).map(b => b2u[b]).join('');
  for (const w of bpe(t)) ids.push(encoder[w]);
}
fs.writeFileSync(outFile, '[' + ids.join(', ') + ']\n');
