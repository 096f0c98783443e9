-- bpe_files.lua: other programs' BPE tokenizer files, read into lwopt.bpe's tokenizers: GPT-2's
-- vocab.json (token -> id) and merges.txt (a merge a line, "#version" first), and Hugging Face's
-- tokenizer.json of a byte-level BPE model (GPT-2's, RoBERTa's). Their tokens are strings of
-- GPT-2's byte-to-unicode mapping (each byte a printable character: "Ġ" is the space); they are
-- turned back into bytes here. It does not write these formats.
local errors = require("lwopt.errors")
local json = require("lwopt.json")
local files = require("lwopt.files")

local formats = {}

local function fail(path, fmt, ...) errors.fail("tokenizer: " .. tostring(path), fmt, ...) end

-- The UTF-8 bytes of code point c (below 0x800: all the mapping needs).
local function utf8(c)
   if c < 0x80 then return string.char(c) end
   return string.char(0xc0 + math.floor(c / 64), 0x80 + c % 64)
end

-- GPT-2's byte-to-unicode mapping: the printable bytes ('!' to '~', '¡' to '¬', '®' to 'ÿ') are
-- their own code points, the other 68 bytes, in order, the code points from 256 on. char[b]
-- is byte b's character (UTF-8), byte_of[character] its byte.
local char, byte_of = {}, {}
do
   local next_free = 256
   for b = 0, 255 do
      local printable = (b >= 33 and b <= 126) or (b >= 161 and b <= 172) or (b >= 174)
      if printable then
         char[b] = utf8(b)
      else
         char[b] = utf8(next_free)
         next_free = next_free + 1
      end
      byte_of[char[b]] = string.char(b)
   end
end
formats.byte_char = char

-- The bytes a token string of the mapping stands for; nil and the first character that is no
-- byte's.
function formats.bytes_of(token)
   local out = {}
   for ch in token:gmatch("[%z\1-\127\192-\255][\128-\191]*") do
      local b = byte_of[ch]
      if b == nil then return nil, ch end
      out[#out + 1] = b
   end
   return table.concat(out)
end

-- The tokenizer of a vocabulary (token string -> id), its merges (a list of { left, right,
-- where }: strings of the mapping, and words for the merge's place in the file) and added
-- tokens (a list of { text, id }: special tokens, their text as it is). Every byte must have a
-- token; a merge's parts and result must be in the vocabulary; an entry that is neither a byte,
-- a merge's result nor an added token becomes a special token too (GPT-2's <|endoftext|>).
local function build(path, kind, vocab, merges, added)
   local byte_ids = {}
   for b = 0, 255 do
      local id = vocab[char[b]]
      if id == nil then
         fail(path, "the vocabulary has no token for byte %d (%s): a byte-level BPE vocabulary "
            .. "holds all 256", b, char[b])
      end
      byte_ids[b] = id
   end
   local covered, list = {}, {}
   for b = 0, 255 do covered[byte_ids[b]] = true end
   for i, m in ipairs(merges) do
      local ids = {}
      for k, token in ipairs({ m[1], m[2], m[1] .. m[2] }) do
         ids[k] = vocab[token]
         if ids[k] == nil then
            fail(path, "%s ('%s %s'): '%s' is not in the vocabulary", m.where, m[1], m[2], token)
         end
      end
      list[i] = { ids[1], ids[2], ids[3], where = " (" .. m.where .. ")" }
      covered[ids[3]] = true
   end
   local specials = {}
   for _, a in ipairs(added) do
      if not covered[a[2]] then
         specials[#specials + 1] = a
         covered[a[2]] = true
      end
   end
   local rest = {}
   for token, id in pairs(vocab) do
      if not covered[id] then rest[#rest + 1] = { token, id } end
   end
   table.sort(rest, function(x, y) return x[2] < y[2] end)
   for _, r in ipairs(rest) do
      local bytes, bad = formats.bytes_of(r[1])
      if bytes == nil then
         fail(path, "token %d '%s' holds '%s', which is no byte's character in GPT-2's mapping",
            r[2], r[1], bad)
      end
      specials[#specials + 1] = { bytes, r[2] }
   end
   return require("lwopt.bpe").build({ byte_ids = byte_ids, merges = list, specials = specials,
      path = path, kind = kind })
end

-- A vocabulary from decoded JSON: string -> whole number, each id once.
local function vocab_of(doc, path, what)
   if type(doc) ~= "table" or getmetatable(doc) == getmetatable(json.array()) then
      fail(path, "%s is not an object of tokens and ids", what)
   end
   local vocab, seen = {}, {}
   for token, id in pairs(doc) do
      if type(id) ~= "number" or id ~= math.floor(id) or id < 0 then
         fail(path, "%s: the id of '%s' is not a whole number >= 0", what, token)
      end
      if seen[id] then fail(path, "%s: tokens '%s' and '%s' have one id, %d", what, seen[id],
         token, id) end
      seen[id], vocab[token] = token, id
   end
   return vocab
end

local function read(path)
   local text, why = files.read(path, require("lwopt.bpe").MAX_FILE_BYTES)
   if text == nil then fail(path, "cannot be read (%s)", why) end
   return text
end

local function decode(text, path)
   local ok, doc = pcall(json.decode, text)
   if not ok then fail(path, "is not JSON (%s)", tostring(doc):gsub("^json%.decode: ", "")) end
   return doc
end

-- Whether a file `name` is beside path (in its folder).
function formats.beside(path, name)
   return files.kind(files.dirname(path) .. "/" .. name) == "file"
end

-- GPT-2's files in dir: vocab.json and merges.txt.
function formats.load_gpt2(dir)
   local vocab_path, merges_path = dir .. "/vocab.json", dir .. "/merges.txt"
   for _, p in ipairs({ vocab_path, merges_path }) do
      if files.kind(p) ~= "file" then fail(p, "not found (GPT-2's tokenizer is vocab.json and "
         .. "merges.txt in one folder)") end
   end
   local vocab = vocab_of(decode(read(vocab_path), vocab_path), vocab_path, "vocab.json")
   local merges, n = {}, 0
   for line in (read(merges_path) .. "\n"):gmatch("([^\n]*)\n") do
      n = n + 1
      line = line:gsub("\r$", "")
      if not (n == 1 and line:match("^#version")) and line ~= "" then
         local a, b = line:match("^(%S+) (%S+)$")
         if a == nil then
            fail(merges_path, "line %d ('%s') is not two tokens separated by a space", n, line)
         end
         merges[#merges + 1] = { a, b, where = "line " .. n }
      end
   end
   -- vocab.json's errors name merges.txt's lines: the merges are read against it
   return build(merges_path, "gpt2", vocab, merges, {})
end

-- Refuses what lwopt would not encode as Hugging Face does: a model other than byte-level BPE
-- with GPT-2's pre-tokenizer, a normalizer, dropout, word prefixes or suffixes.
local function check_hf(doc, path)
   local null = json.null
   local m = doc.model
   local function absent(v) return v == nil or v == null or v == false or v == "" end
   if m.type ~= nil and m.type ~= "BPE" then
      fail(path, "model.type %s: lwopt reads BPE models only", json.encode(m.type or null))
   end
   for _, field in ipairs({ "dropout", "continuing_subword_prefix", "end_of_word_suffix",
      "byte_fallback", "ignore_merges" }) do
      if not absent(m[field]) then
         fail(path, "model.%s is %s: lwopt's BPE has no such option", field, json.encode(m[field]))
      end
   end
   if not absent(doc.normalizer) then
      fail(path, "has a normalizer (%s): lwopt applies none",
         json.encode(doc.normalizer.type or "?"))
   end
   local p = doc.pre_tokenizer
   if type(p) ~= "table" or p.type ~= "ByteLevel" or p.add_prefix_space == true
      or p.use_regex == false then
      fail(path, "pre_tokenizer %s: lwopt encodes with GPT-2's pre-tokenizer only (ByteLevel, "
         .. "add_prefix_space false, use_regex true)",
         type(p) == "table" and json.encode(p) or json.encode(p or null))
   end
end

-- Hugging Face's tokenizer.json, decoded.
function formats.from_hf(doc, path)
   check_hf(doc, path)
   local vocab = vocab_of(doc.model.vocab, path, "model.vocab")
   local merges = {}
   local list = doc.model.merges
   if type(list) ~= "table" then fail(path, "model.merges is not a list") end
   for i, m in ipairs(list) do
      local a, b
      if type(m) == "string" then a, b = m:match("^(%S+) (%S+)$")
      elseif type(m) == "table" and #m == 2 then a, b = m[1], m[2] end
      if type(a) ~= "string" or type(b) ~= "string" then
         fail(path, "model.merges[%d] is not \"LEFT RIGHT\" nor [LEFT, RIGHT]", i - 1)
      end
      merges[i] = { a, b, where = ("model.merges[%d]"):format(i - 1) }
   end
   local added = {}
   for i, a in ipairs(type(doc.added_tokens) == "table" and doc.added_tokens or {}) do
      if type(a) ~= "table" or type(a.content) ~= "string" or type(a.id) ~= "number" then
         fail(path, "added_tokens[%d] has no content and id", i - 1)
      end
      added[#added + 1] = { a.content, a.id }
   end
   return build(path, "hf", vocab, merges, added)
end

-- A folder of a tokenizer's files: tokenizer.json, else vocab.json and merges.txt.
function formats.load_dir(dir)
   local hf = dir .. "/tokenizer.json"
   if files.kind(hf) == "file" then return formats.from_hf(decode(read(hf), hf), hf) end
   if files.kind(dir .. "/vocab.json") == "file" or files.kind(dir .. "/merges.txt") == "file" then
      return formats.load_gpt2(dir)
   end
   fail(dir, "a folder without tokenizer.json, nor vocab.json and merges.txt")
end

return formats
