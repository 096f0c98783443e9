-- tokenizer.lua: reads the tokenizer files llm.c writes (gpt2_tokenizer.bin: a header of 256
-- little-endian uint32, magic 20240328, version 1 or 2, the vocabulary size and, in version 2,
-- the end-of-text token's id; then per token a length byte and that many bytes) and decodes
-- token ids into text. Such a file holds each token's bytes, not GPT-2's BPE merges, so it does
-- not encode; a BPE tokenizer's files (lwopt's tokenizer file, GPT-2's vocab.json and
-- merges.txt, Hugging Face's tokenizer.json) are read by lwopt.bpe, which encodes too.
local errors = require("lwopt.errors")

local tokenizer = {}

tokenizer.MAGIC = 20240328
tokenizer.HEADER_BYTES = 256 * 4
-- Version 1 files do not record the end-of-text token: GPT-2's, the last of its 50257.
tokenizer.GPT2_EOT = 50256

local Tokenizer = {}
Tokenizer.__index = Tokenizer

local function fail(path, fmt, ...) errors.fail("tokenizer: " .. tostring(path), fmt, ...) end

-- The little-endian uint32 at 0-based byte offset `at` of s.
local function u32(s, at)
   local a, b, c, d = s:byte(at + 1, at + 4)
   return a + b * 256 + c * 65536 + d * 16777216
end

-- tokenizer.load(path): { path, version, vocab (the number of tokens), eot (the end-of-text
-- token's id, or nil), pieces (id -> bytes, ids from 0) }, with :decode(ids). Errors name the
-- file and what is wrong: not found, a bad magic or version, a file cut short, a token of no
-- bytes, bytes left after the last token. A folder or a JSON file is a BPE tokenizer's
-- (lwopt.bpe.load: path, vocab, eot, decode, and encode).
function tokenizer.load(path)
   local f, why = io.open(path, "rb")
   if f == nil then fail(path, "cannot be read (%s)", tostring(why)) end
   local s = f:read("*a")
   f:close()
   -- a folder of tokenizer files, or a JSON tokenizer: BPE's, which encodes too
   if s == nil or s:match("^%s*{") or path:match("merges%.txt$") then
      return require("lwopt.bpe").load(path)
   end
   if #s < tokenizer.HEADER_BYTES then
      fail(path, "has %d bytes, less than the %d-byte header: truncated, or not a tokenizer "
         .. "file", #s, tokenizer.HEADER_BYTES)
   end
   local magic, version, vocab = u32(s, 0), u32(s, 4), u32(s, 8)
   if magic ~= tokenizer.MAGIC then
      fail(path, "magic %d, not %d: not a tokenizer file in llm.c's format "
         .. "(gpt2_tokenizer.bin)", magic, tokenizer.MAGIC)
   end
   if version ~= 1 and version ~= 2 then
      fail(path, "version %d; this reader takes versions 1 and 2", version)
   end
   local eot
   if version == 2 then
      eot = u32(s, 12)
   elseif vocab > tokenizer.GPT2_EOT then
      eot = tokenizer.GPT2_EOT
   end
   local pieces, at = {}, tokenizer.HEADER_BYTES
   for id = 0, vocab - 1 do
      local len = s:byte(at + 1)
      if len == nil or at + 1 + len > #s then
         fail(path, "truncated: it ends in token %d of the %d its header counts (at byte %d)", id,
            vocab, #s)
      end
      if len == 0 then fail(path, "token %d has no bytes (its length is 0)", id) end
      pieces[id] = s:sub(at + 2, at + 1 + len)
      at = at + 1 + len
   end
   if at ~= #s then
      fail(path, "%d bytes after the last of the %d tokens its header counts: another "
         .. "vocabulary size?", #s - at, vocab)
   end
   if eot ~= nil and eot >= vocab then
      fail(path, "the end-of-text token %d is not below the vocabulary size %d", eot, vocab)
   end
   return setmetatable({ path = path, version = version, vocab = vocab, eot = eot,
                         pieces = pieces }, Tokenizer)
end

-- The text of a list of token ids (the pieces' bytes one after the other: a character split
-- over two tokens is whole once both are). An id outside the vocabulary is an error.
function Tokenizer:decode(ids)
   local out = {}
   for i, id in ipairs(ids) do
      local piece = self.pieces[id]
      if piece == nil then
         fail(self.path, "token %s is outside its vocabulary [0, %d)", tostring(id), self.vocab)
      end
      out[i] = piece
   end
   return table.concat(out)
end

return tokenizer
