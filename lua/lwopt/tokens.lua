-- tokens.lua: token data in the shards llm.c and modded-nanogpt write (src/core/io/
-- token_shards.c: every header checked on open, the tokens mapped read-only, never read whole),
-- with the Dataset interface of lw.data, so lw.train runs on it unchanged and a step's batch is
-- the same function of (seed, step, k) (data.offset, data.sequence), or of its order
-- (lwopt.data_order: the shards read in order), at any rank count. Each
-- batch is checked against the model's vocabulary as it is read. tokens.prepare writes such
-- shards from text files with a BPE tokenizer (lwopt.bpe, which tokenizes).
local ffi = require("ffi")
local C = require("lwopt.C")
local data = require("lwopt.data")
local files = require("lwopt.files")
local errors = require("lwopt.errors")

local lib = C.lib
local tokens = {}

local fail = errors.failer("lw.tokens")

-- The vocabulary of GPT-2's tokenizer, which version-1 shards (FineWeb, TinyStories, ...) use.
tokens.GPT2_VOCAB = 50257

local Dataset = {}
Dataset.__index = Dataset

-- Whether a --data value names token shards (a wildcard pattern or a path ending in .bin)
-- rather than a text file.
function tokens.is_shards(path)
   return files.has_wildcards(path) or path:match("%.bin$") ~= nil
end

-- The shards a pattern names, sorted: a wildcard pattern's matches (an error naming it when
-- there are none), or a path as it is (opening it says what is wrong with it).
function tokens.expand(pattern)
   if not files.has_wildcards(pattern) then return { pattern } end
   local found = files.glob(pattern)
   if #found == 0 then fail("no file matches '%s'", pattern) end
   return found
end

-- The validation pattern llm.c's naming implies for a training pattern (fineweb_train_*.bin:
-- fineweb_val_*.bin): "train" replaced by "val" in the file name; nil without "train" there.
function tokens.val_pattern(pattern)
   local dir, base = pattern:match("^(.*/)([^/]*)$")
   if dir == nil then dir, base = "", pattern end
   if not base:find("train", 1, true) then return nil end
   return dir .. base:gsub("train", "val")
end

-- Opens shard paths: { handle, paths, total }.
local function open_shards(paths)
   local cpaths = ffi.new("const char*[?]", #paths)
   for i, p in ipairs(paths) do cpaths[i - 1] = p end -- `paths` keeps the strings alive
   local out = ffi.new("lw_token_shards*[1]")
   C.check(lib.lw_token_shards_open(cpaths, #paths, out), "lw.tokens")
   local handle = ffi.gc(out[0], lib.lw_token_shards_free)
   return { handle = handle, paths = paths, total = tonumber(lib.lw_token_shards_total(handle)) }
end

-- tokens.open(pattern, opts): the training shards `pattern` names (a path or a wildcard pattern
-- over one directory level, sorted), opened as one token sequence. opts: vocab (the model's
-- vocabulary: every token read must be below it; default GPT2_VOCAB), seq_len (checked to fit
-- both splits), val (validation shards; default: val_pattern(pattern) when that matches files,
-- else the last val_fraction of the training tokens), val_fraction (0.05), hint (appended to a
-- token outside the vocabulary's error: what sets the vocabulary).
function tokens.open(pattern, opts)
   opts = opts or {}
   local vocab = opts.vocab or tokens.GPT2_VOCAB
   if type(vocab) ~= "number" or vocab < 1 or vocab ~= math.floor(vocab) then
      fail("vocab must be a whole number >= 1, got %s", tostring(vocab))
   end
   local train = open_shards(tokens.expand(pattern))
   local val_path = opts.val
   if val_path == nil then
      local guess = tokens.val_pattern(pattern)
      if guess and guess ~= pattern and #files.glob(guess) > 0 then val_path = guess end
   end
   local seq = opts.seq_len or 1
   local self = setmetatable({ kind = "tokens", path = pattern, vocab = vocab, train = train,
      hint = opts.hint, val_path = val_path }, Dataset)
   if val_path then
      self.val = open_shards(tokens.expand(val_path))
      self.n_train, self.n_val, self.val_base = train.total, self.val.total, 0
      if self.n_train < seq + 2 or self.n_val < seq + 2 then
         fail("'%s' has %d training tokens and '%s' %d validation tokens, too few for "
            .. "sequences of %d", pattern, self.n_train, val_path, self.n_val, seq)
      end
   else
      self.val = train
      self.n_val = math.floor(train.total * (opts.val_fraction or 0.05))
      self.n_train = train.total - self.n_val
      self.val_base = self.n_train
      if self.n_train < seq + 2 or self.n_val < seq + 2 then
         fail("'%s' has %d tokens, too few for sequences of %d with a 5%% validation split",
            pattern, train.total, seq)
      end
   end
   self.n = self.n_train + self.n_val
   return self
end

-- Copies len tokens of shards s from pos into out (int32_t*), each checked against the
-- dataset's vocabulary.
local function read(self, s, pos, len, out)
   C.check(lib.lw_token_shards_read(s.handle, pos, len, self.vocab, out), "lw.tokens", self.hint)
end

-- A sequence of t tokens from `at` and its targets (the next t), read once as t + 1 tokens.
local function read_sequence(self, s, at, t, tokens_row, targets_row)
   if self.scratch_len ~= t + 1 then
      self.scratch, self.scratch_len = ffi.new("int32_t[?]", t + 1), t + 1
   end
   read(self, s, at, t + 1, self.scratch)
   ffi.copy(tokens_row, self.scratch, 4 * t)
   ffi.copy(targets_row, self.scratch + 1, 4 * t)
end

-- Start offset in the training split of sequence k of step `step` (its order's, set_order), and
-- the validation set's count of sequences (at most `max`): lw.data's, over n_train and n_val.
Dataset.offset, Dataset.val_count = data.Dataset.offset, data.Dataset.val_count
Dataset.set_order = data.Dataset.set_order

local info_cell = ffi.new("lw_token_shard_info")

-- The shard that holds token `token` of the training split: its path, its index (1-based) and
-- the token's offset in it.
function Dataset:locate(token)
   local h = self.train.handle
   for i = 0, lib.lw_token_shards_count(h) - 1 do
      C.check(lib.lw_token_shards_info(h, i, info_cell), "lw.tokens")
      local start = tonumber(info_cell.start)
      if token < start + tonumber(info_cell.tokens) then
         return self.train.paths[i + 1], i + 1, token - start
      end
   end
   fail("token %d is past the training shards' %d tokens", token, self.train.total)
end

-- Fills tokens and targets (int32_t* [b * t]) with the micro-batch of this rank: sequences
-- k = micro * ranks * b + rank * b + i of the step's global batch.
function Dataset:train_batch(tokens_out, targets, seed, step, micro, rank, ranks, b, t)
   for i = 0, b - 1 do
      local at = self:offset(seed, step, data.sequence(micro, rank, ranks, b, i), t)
      read_sequence(self, self.train, at, t, tokens_out + i * t, targets + i * t)
   end
end

-- Fills a batch of validation sequences first .. first + b - 1 (missing ones get targets -1).
function Dataset:val_batch(tokens_out, targets, first, count, b, t)
   for i = 0, b - 1 do
      local k, row = first + i, i * t
      if k < count then
         read_sequence(self, self.val, self.val_base + k * t, t, tokens_out + row, targets + row)
      else
         ffi.fill(tokens_out + row, 4 * t, 0)
         ffi.fill(targets + row, 4 * t, 0xff) -- -1: ignored
      end
   end
end

-- The first len tokens of the validation split, as a list of numbers (a sample's prompt).
function Dataset:val_tokens(len)
   len = math.min(len, self.n_val)
   local out = ffi.new("int32_t[?]", math.max(len, 1))
   read(self, self.val, self.val_base, len, out)
   local list = {}
   for i = 0, len - 1 do list[i + 1] = out[i] end
   return list
end

-- Shards and tokens in words: "3 shards, 1200000 tokens" for the training (or "val") split.
function Dataset:describe(split)
   local s = split == "val" and self.val or self.train
   local shards = #s.paths
   local n = split == "val" and self.n_val or self.n_train
   return ("%d shard%s, %d tokens"):format(shards, shards == 1 and "" or "s", n)
end

-- Writes ids[0 .. n) (an int32_t array) as a new shard at path: version 1 (uint16) or 2
-- (uint32), fsynced. Errors name the file, or a token too large for the version.
function tokens.write(path, ids, n, version)
   C.check(lib.lw_token_shards_write(path, version, ids, n), "lw.tokens")
end

-- The shards a prepared name holds in dir: NAME_train_*.bin and NAME_val_*.bin.
function tokens.prepared(dir, name)
   local found = {}
   for _, split in ipairs({ "train", "val" }) do
      for _, p in ipairs(files.glob(("%s/%s_%s_*.bin"):format(dir, name, split))) do
         found[#found + 1] = p
      end
   end
   return found
end

-- tokens.prepare(paths, tokenizer, opts): token shards in llm.c's format from text files, each
-- a document that the tokenizer's end-of-text token (when it has one) begins, as llm.c's
-- data scripts do; special tokens' texts in them are their ids. The last val_fraction of the
-- tokens are the validation split. opts: dir, name (shards dir/NAME_train_000000.bin, ...,
-- dir/NAME_val_000000.bin: the pattern the recipe's --data finds validation shards by),
-- val_fraction (0.05; 0: no validation shard), shard_tokens (tokens a shard holds at most,
-- 100M). Returns { tokens, train = { paths }, val = { paths }, n_train, n_val, version }.
-- Every file is encoded (its ids held in memory) before a shard is written.
function tokens.prepare(paths, tokenizer, opts)
   local docs, total = {}, 0
   local eot = tokenizer.eot
   local lead = eot and 1 or 0
   for i, path in ipairs(paths) do
      local ids, n = tokenizer:encode_file(path, true)
      docs[i] = { ids = ids, n = n }
      total = total + lead + n
   end
   local fraction = opts.val_fraction or 0.05
   local n_val = math.floor(total * fraction)
   local n_train = total - n_val
   if n_train < 1 or (fraction > 0 and n_val < 1) then
      fail("%d tokens are too few for a validation split of %g", total, fraction)
   end
   local version = tokenizer.vocab <= 65536 and 1 or 2
   local per = math.min(opts.shard_tokens or 1e8, math.max(n_train, n_val))
   local cell = ffi.new("void*[1]")
   C.check(lib.lw_host_alloc(per * 4, cell), "lw.tokens")
   local buf = ffi.gc(ffi.cast("int32_t*", cell[0]), lib.lw_host_free)
   -- copies tokens [from, from + len) of the documents one after the other into buf
   local function fill(from, len)
      local at, k = 0, 0
      for _, d in ipairs(docs) do
         local lo, hi = math.max(from, at), math.min(from + len, at + lead + d.n)
         if lo < hi and lead == 1 and lo == at then
            buf[k], k, lo = eot, k + 1, lo + 1
         end
         if lo < hi then
            ffi.copy(buf + k, d.ids + (lo - at - lead), (hi - lo) * 4)
            k = k + hi - lo
         end
         at = at + lead + d.n
      end
   end
   local out = { tokens = total, n_train = n_train, n_val = n_val, version = version,
      train = {}, val = {} }
   local function write(split, from, count)
      local list = out[split]
      for start = from, from + count - 1, per do
         local len = math.min(per, from + count - start)
         local path = ("%s/%s_%s_%06d.bin"):format(opts.dir, opts.name, split, #list)
         fill(start, len)
         tokens.write(path, buf, len, version)
         list[#list + 1] = path
      end
   end
   write("train", 0, n_train)
   write("val", n_train, n_val)
   return out
end

return tokens
