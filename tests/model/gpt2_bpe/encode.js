// node encode.js ENCODER_JS REQUEST_JSON OUT_JSON: runs gpt-3-encoder's encode over each corpus
// entry of REQUEST_JSON (see make_expected.py) and its decode over each id sequence, and writes
// {"encode": [[ids], ...], "decode": [[ids, text], ...]} to OUT_JSON.
'use strict';
const fs = require('fs');
const [, , encoderPath, requestPath, outPath] = process.argv;
const {encode, decode} = require(encoderPath);
// The encoder's own pattern (Encoder.js), to check that each listed piece stays whole.
const pat = /'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+/gu;

const request = JSON.parse(fs.readFileSync(requestPath, 'utf-8'));
const encoded = request.corpus.map(({text, pieces}) => {
  if (pieces === undefined) return encode(text);
  if (pieces.join('') !== text) throw new Error(`pieces of ${JSON.stringify(text)} do not join`);
  return pieces.flatMap(piece => {
    const matches = Array.from(piece.matchAll(pat));
    if (matches.length !== 1) {
      throw new Error(`JavaScript splits the piece ${JSON.stringify(piece)} in ${matches.length}`);
    }
    return encode(piece);
  });
});
const decoded = request.decode.map(ids => [ids, decode(ids)]);
fs.writeFileSync(outPath, JSON.stringify({encode: encoded, decode: decoded}));
