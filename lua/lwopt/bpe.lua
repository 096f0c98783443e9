-- bpe.lua: byte-level BPE tokenizers (src/core/io/bpe*.c: GPT-2's pre-tokenizer, training,
-- encoding): trained on text files, written to and read from lwopt's tokenizer file (JSON:
-- docs/tokenizers.md), or read from GPT-2's vocab.json and merges.txt or Hugging Face's
-- tokenizer.json (lwopt.bpe_files). A tokenizer encodes text and files and decodes ids; it has
-- the fields lwopt.tokenizer's llm.c reader has (path, vocab, eot, decode), so either serves a
-- sample.
local ffi = require("ffi")
local C = require("lwopt.C")
local errors = require("lwopt.errors")
local json = require("lwopt.json")
local files = require("lwopt.files")

local lib = C.lib
local bpe = {}

bpe.FORMAT = "lwopt-bpe"
bpe.VERSION = 1
bpe.EOT = "<|endoftext|>"
-- A pair seen fewer times in the training text is never merged.
bpe.MIN_COUNT = 2
-- The largest tokenizer file read (GPT-2's tokenizer.json has 1.4 MB).
bpe.MAX_FILE_BYTES = 2 ^ 30

local Tokenizer = {}
Tokenizer.__index = Tokenizer

local function fail(path, fmt, ...) errors.fail("tokenizer: " .. tostring(path), fmt, ...) end

local out_ptr = ffi.new("lw_bpe*[1]")
local id_cell, len_cell = ffi.new("int32_t[3]"), ffi.new("int64_t[1]")

-- The tokenizer object over a handle (owned: freed with it).
local function wrap(handle, path, kind)
   local self = setmetatable({ handle = handle, path = path, kind = kind,
      vocab = lib.lw_bpe_vocab(handle), merges = lib.lw_bpe_merge_count(handle),
      specials = {} }, Tokenizer)
   for i = 0, lib.lw_bpe_special_count(handle) - 1 do
      local text = lib.lw_bpe_special(handle, i, id_cell, len_cell)
      local s = { text = ffi.string(text, len_cell[0]), id = id_cell[0] }
      self.specials[i + 1] = s
      if s.text == bpe.EOT then self.eot = s.id end
   end
   return self
end

-- A tokenizer from its parts: spec = { byte_ids (nil: byte b is token b; else a table
-- [0..255] -> id), merges (a list of { left, right, id }, in rank order), specials (a list of
-- { text, id }), path, kind ("lwopt" | "gpt2" | "hf") }. Errors name the path and the merge.
function bpe.build(spec)
   local ids
   if spec.byte_ids then
      ids = ffi.new("int32_t[256]")
      for b = 0, 255 do ids[b] = spec.byte_ids[b] end
   end
   C.check(lib.lw_bpe_new(ids, out_ptr), "tokenizer: " .. spec.path)
   local handle = ffi.gc(out_ptr[0], lib.lw_bpe_free)
   for _, m in ipairs(spec.merges) do
      if lib.lw_bpe_add_merge(handle, m[1], m[2], m[3]) ~= 0 then
         fail(spec.path, "%s%s", C.last_error():gsub("^bpe: ", ""), m.where or "")
      end
   end
   for _, s in ipairs(spec.specials or {}) do
      if lib.lw_bpe_add_special(handle, s[1], #s[1], s[2]) ~= 0 then
         fail(spec.path, "%s", (C.last_error():gsub("^bpe: ", "")))
      end
   end
   return wrap(handle, spec.path, spec.kind)
end

-- bpe.train(paths, opts): a tokenizer learnt from the text files `paths` (each a document: no
-- chunk spans two). opts: vocab (the tokens wanted: 256 bytes, the merges, the special tokens),
-- special (a list of texts, default { "<|endoftext|>" }), min_count (bpe.MIN_COUNT), path (the
-- name it will be saved under). Returns the tokenizer and { bytes, chunks, distinct,
-- count_seconds (reading and counting the chunks), merge_seconds (learning the merges) }.
function bpe.train(paths, opts)
   local special = opts.special or { bpe.EOT }
   local vocab = opts.vocab
   if type(vocab) ~= "number" or vocab ~= math.floor(vocab) or vocab < 256 + #special then
      errors.fail("bpe.train", "vocab %s is smaller than the 256 byte tokens and the %d special "
         .. "token%s", tostring(vocab), #special, #special == 1 and "" or "s")
   end
   local texts = ffi.new("const char*[?]", math.max(#special, 1))
   for i, s in ipairs(special) do texts[i - 1] = s end -- `special` keeps the strings alive
   local trainer_out = ffi.new("lw_bpe_trainer*[1]")
   C.check(lib.lw_bpe_trainer_new(vocab, opts.min_count or bpe.MIN_COUNT, texts, #special,
      trainer_out), "bpe.train")
   local trainer = ffi.gc(trainer_out[0], lib.lw_bpe_trainer_free)
   local start = lib.lw_now()
   for _, path in ipairs(paths) do
      C.check(lib.lw_bpe_trainer_add_file(trainer, path), "bpe.train")
   end
   local counted = lib.lw_now()
   C.check(lib.lw_bpe_trainer_train(trainer, out_ptr), "bpe.train")
   local handle = ffi.gc(out_ptr[0], lib.lw_bpe_free)
   local counts = ffi.new("int64_t[3]")
   lib.lw_bpe_trainer_counts(trainer, counts, counts + 1, counts + 2)
   local stats = { bytes = tonumber(counts[0]), chunks = tonumber(counts[1]),
      distinct = tonumber(counts[2]), count_seconds = counted - start,
      merge_seconds = lib.lw_now() - counted }
   return wrap(handle, opts.path or "(trained)", "lwopt"), stats
end

-- The chunks GPT-2's pre-tokenizer cuts text into, as a list of strings.
function bpe.chunks(text)
   local list, at = {}, 0
   while at < #text do
      local stop = tonumber(lib.lw_bpe_chunk(text, #text, at))
      list[#list + 1] = text:sub(at + 1, stop)
      at = stop
   end
   return list
end

-- The ids of text as a cdata int32_t array and their count. special (default true): a special
-- token's text is its id; false: text like any other.
function Tokenizer:encode_raw(text, special)
   local ids, n = ffi.new("int32_t[?]", math.max(#text, 1)), ffi.new("int64_t[1]")
   C.check(lib.lw_bpe_encode(self.handle, text, #text, special ~= false, ids, n),
      "tokenizer: " .. self.path)
   return ids, tonumber(n[0])
end

-- The ids of text, as a list. opts.special as encode_raw's.
function Tokenizer:encode(text, opts)
   local ids, n = self:encode_raw(text, not (opts and opts.special == false))
   local list = {}
   for i = 0, n - 1 do list[i + 1] = ids[i] end
   return list
end

-- The ids of a text file, read and encoded in C: an int32_t* (freed when collected) and their
-- count. Errors name the file.
function Tokenizer:encode_file(path, special)
   local out, n = ffi.new("int32_t*[1]"), ffi.new("int64_t[1]")
   C.check(lib.lw_bpe_encode_file(self.handle, path, special ~= false, out, n), "tokenizer")
   return ffi.gc(out[0], lib.lw_bpe_ids_free), tonumber(n[0])
end

-- The text of ids: a list of numbers, or an int32_t array and its count n. An id that is no
-- token is an error naming it and its position.
function Tokenizer:decode(ids, n)
   local array = ids
   if type(ids) == "table" then
      n = #ids
      array = ffi.new("int32_t[?]", math.max(n, 1))
      for i = 1, n do
         local id = ids[i]
         if type(id) ~= "number" or id ~= math.floor(id) or id < 0 or id >= 2 ^ 31 then
            fail(self.path, "token %s is outside its vocabulary [0, %d)", tostring(id), self.vocab)
         end
         array[i - 1] = id
      end
   end
   if lib.lw_bpe_decode(self.handle, array, n, nil, 0, len_cell) ~= 0 then
      local id, at = C.last_error():match("id (%-?%d+) %(at (%d+)%)")
      fail(self.path, "token %s (at %s) is outside its vocabulary [0, %d)", id, at, self.vocab)
   end
   local bytes = tonumber(len_cell[0])
   local out = ffi.new("char[?]", math.max(bytes, 1))
   C.check(lib.lw_bpe_decode(self.handle, array, n, out, bytes, len_cell), "tokenizer")
   return ffi.string(out, bytes)
end

-- The bytes of token id, or nil when it is no token.
function Tokenizer:token(id)
   local p = lib.lw_bpe_token(self.handle, id, len_cell)
   if p == nil then return nil end
   return ffi.string(p, len_cell[0])
end

-- What it is, in words: "4096 tokens (256 bytes, 3839 merges, 1 special)".
function Tokenizer:describe()
   local n = #self.specials
   return ("%d tokens (256 bytes, %d merges, %d special%s)"):format(self.vocab, self.merges, n,
      n == 1 and "" or "s")
end

-- Writes lwopt's tokenizer file at path (JSON, one merge a line: docs/tokenizers.md), replaced
-- whole and fsynced. Only a tokenizer whose bytes are tokens 0-255 and whose merges make 256,
-- 257, ... in rank order has this form (one lwopt trained or read from this format).
function Tokenizer:save(path)
   for b = 0, 255 do
      if self:token(b) ~= string.char(b) then
         errors.fail("tokenizer.save", "%s: token %d is not byte %d: this tokenizer (read from "
            .. "%s's files) has no lwopt form", self.path, b, b, self.kind)
      end
   end
   local lines = { "{", ('  "format": %s,'):format(json.encode(bpe.FORMAT)),
      ('  "version": %d,'):format(bpe.VERSION), '  "pre_tokenizer": "gpt2",',
      ('  "vocab": %d,'):format(self.vocab), '  "special": [' }
   for i, s in ipairs(self.specials) do
      lines[#lines + 1] = ('    {"id": %d, "text": %s}%s'):format(s.id, json.encode(s.text),
         i < #self.specials and "," or "")
   end
   lines[#lines + 1] = '  ],'
   lines[#lines + 1] = '  "merges": ['
   local l, r, id = id_cell, id_cell + 1, id_cell + 2
   for rank = 0, self.merges - 1 do
      C.check(lib.lw_bpe_merge(self.handle, rank, l, r, id), "tokenizer")
      if id[0] ~= 256 + rank then
         errors.fail("tokenizer.save", "%s: merge %d makes token %d, not %d: this tokenizer "
            .. "(read from %s's files) has no lwopt form", self.path, rank, id[0], 256 + rank,
            self.kind)
      end
      lines[#lines + 1] = ("    [%d, %d]%s"):format(l[0], r[0],
         rank + 1 < self.merges and "," or "")
   end
   lines[#lines + 1] = "  ]"
   lines[#lines + 1] = "}\n"
   local text = table.concat(lines, "\n")
   C.check(lib.lw_file_write(path, text, #text, nil), "tokenizer.save")
end

-- Reads lwopt's tokenizer file from its decoded JSON doc; errors name the path and the field.
local function from_lwopt(doc, path)
   if doc.version ~= bpe.VERSION then
      fail(path, "version %s; this lwopt reads version %d", tostring(doc.version), bpe.VERSION)
   end
   if doc.pre_tokenizer ~= "gpt2" then
      fail(path, "pre_tokenizer %s; lwopt has \"gpt2\" only", json.encode(doc.pre_tokenizer))
   end
   local function whole(v) return type(v) == "number" and v == math.floor(v) and v >= 0 end
   if type(doc.merges) ~= "table" or getmetatable(doc.merges) ~= getmetatable(json.array()) then
      fail(path, "has no \"merges\" array")
   end
   local merges = {}
   for i, m in ipairs(doc.merges) do
      if type(m) ~= "table" or #m ~= 2 or not whole(m[1]) or not whole(m[2]) then
         fail(path, "merge %d is not a pair of token ids [left, right]", i - 1)
      end
      merges[i] = { m[1], m[2], 255 + i, where = "" }
   end
   local specials = {}
   for i, s in ipairs(type(doc.special) == "table" and doc.special or {}) do
      if type(s) ~= "table" or type(s.text) ~= "string" or not whole(s.id) then
         fail(path, "special token %d is not {\"id\": ID, \"text\": TEXT}", i - 1)
      end
      specials[i] = { s.text, s.id }
   end
   local t = bpe.build({ merges = merges, specials = specials, path = path, kind = "lwopt" })
   if doc.vocab ~= t.vocab then
      fail(path, "says vocab %s, but its bytes, %d merges and %d special tokens make %d tokens",
         tostring(doc.vocab), #merges, #specials, t.vocab)
   end
   return t
end

-- bpe.load(path): a tokenizer from lwopt's tokenizer file, Hugging Face's tokenizer.json, or
-- GPT-2's vocab.json and merges.txt (path: their folder, or either file beside the other).
-- Errors name the file and what is wrong with it.
function bpe.load(path)
   local kind = files.kind(path)
   local formats = require("lwopt.bpe_files")
   if kind == "missing" then fail(path, "not found") end
   if kind == "dir" then return formats.load_dir(path) end
   local name = path:match("[^/]*$")
   if name == "merges.txt"
      or (name:match("vocab%.json$") and formats.beside(path, "merges.txt")) then
      return formats.load_gpt2(files.dirname(path))
   end
   local text, why = files.read(path, bpe.MAX_FILE_BYTES)
   if text == nil then fail(path, "cannot be read (%s)", why) end
   local ok, doc = pcall(json.decode, text)
   if not ok then
      fail(path, "is not a JSON tokenizer file (%s)", tostring(doc):gsub("^json%.decode: ", ""))
   end
   if type(doc) ~= "table" or getmetatable(doc) == getmetatable(json.array()) then
      fail(path, "is not a JSON object")
   end
   if doc.format == bpe.FORMAT then return from_lwopt(doc, path) end
   if type(doc.model) == "table" then return formats.from_hf(doc, path) end
   fail(path, "is neither lwopt's tokenizer file (\"format\": \"%s\") nor Hugging Face's "
      .. "tokenizer.json (a \"model\")", bpe.FORMAT)
end

return bpe
