-- data.lua: byte-level text data. Tokens are bytes (vocabulary 256); the last 5% of the file is
-- the validation split. A step's global batch is a fixed set of sequences chosen from (seed,
-- step) alone, or read in order with a sequential order (lwopt.data_order, set_order), so runs
-- at any rank count and accumulation give the same losses: sequence k of the global batch goes
-- to micro-step floor(k / (ranks * batch)), rank floor(k / batch) % ranks. Token shards
-- (lwopt.tokens) have the same interface and draw in the same order.
local ffi = require("ffi")
local bit = require("bit")
local errors = require("lwopt.errors")

local data = {}

local fail = errors.failer("lw.data")

-- The largest file data.load reads whole (LuaJIT strings stop just below 2 GiB).
data.MAX_BYTES = 0x7fffff00

-- The class of data.load's datasets; lw.tokens' datasets share its split arithmetic (offset,
-- val_count), which reads only n_train and n_val.
local Dataset = {}
Dataset.__index = Dataset
data.Dataset = Dataset

-- Loads a text file as bytes. Errors name the file and say how to get the default corpus.
function data.load(path, opts)
   opts = opts or {}
   local f, err = io.open(path, "rb")
   if f == nil then
      fail("cannot read '%s' (%s)%s", path, tostring(err), opts.hint or "")
   end
   if require("lwopt.files").kind(path) == "dir" then -- io.open succeeds on a directory
      f:close()
      fail("cannot read '%s': it is a directory, not a text file", path)
   end
   local size = f:seek("end")
   if size and size > data.MAX_BYTES then
      f:close()
      fail("'%s' has %.2f GiB; this loader reads text files of up to 2 GiB (a LuaJIT string's "
         .. "limit): use a part of it", path, size / 2 ^ 30)
   end
   f:seek("set")
   local text = f:read("*a")
   f:close()
   if text == nil then fail("cannot read '%s'", path) end
   local n = #text
   local seq = opts.seq_len or 1
   local n_val = math.floor(n * (opts.val_fraction or 0.05))
   if n - n_val < seq + 2 or n_val < seq + 2 then
      fail("'%s' has %d bytes, too few for sequences of %d with a 5%% validation split", path,
         n, seq)
   end
   local bytes = ffi.new("uint8_t[?]", n)
   ffi.copy(bytes, text, n)
   return setmetatable({ kind = "bytes", path = path, bytes = bytes, n = n,
                         n_train = n - n_val, n_val = n_val, vocab = 256 }, Dataset)
end

-- splitmix64: a counter-based generator, the same on every machine.
local function mix(z)
   z = z + 0x9E3779B97F4A7C15ULL
   z = bit.bxor(z, bit.rshift(z, 30)) * 0xBF58476D1CE4E5B9ULL
   z = bit.bxor(z, bit.rshift(z, 27)) * 0x94D049BB133111EBULL
   return bit.bxor(z, bit.rshift(z, 31))
end

-- Start offset, in a training split of n_train tokens, of sequence k of step `step`: a
-- sequence of t tokens and its t targets fit in the split. Every dataset (lw.tokens too) draws
-- its batches through this and data.sequence, so the order is one function of (seed, step, k).
function data.offset(n_train, seed, step, k, t)
   local z = mix(mix(mix(0ULL + seed) + step) + k)
   return tonumber(z % (n_train - t - 1))
end

-- Which sequence k of the step's global batch is row i of this rank's micro-batch `micro`.
function data.sequence(micro, rank, ranks, b, i)
   return (micro * ranks + rank) * b + i
end

-- Start offset in the training split of sequence k of step `step`: drawn from (seed, step, k),
-- or where the dataset's order (set_order) reads it.
function Dataset:offset(seed, step, k, t)
   if self.order then return self.order:offset(step, k, t) end
   return data.offset(self.n_train, seed, step, k, t)
end

-- Reads the training sequences in `order` (lwopt.data_order's; nil: random windows again).
function Dataset:set_order(order)
   self.order = order
end

-- The file that holds token `token` of the training split, its index (1) and the offset there.
function Dataset:locate(token)
   return self.path, 1, token
end

-- Fills tokens and targets (int32_t* [b * t]) with the micro-batch of this rank: sequences
-- k = micro * ranks * b + rank * b + i of the step's global batch.
function Dataset:train_batch(tokens, targets, seed, step, micro, rank, ranks, b, t)
   local bytes = self.bytes
   for i = 0, b - 1 do
      local k = data.sequence(micro, rank, ranks, b, i)
      local at = self:offset(seed, step, k, t)
      local row = i * t
      for j = 0, t - 1 do
         tokens[row + j] = bytes[at + j]
         targets[row + j] = bytes[at + j + 1]
      end
   end
end

-- The validation set: consecutive non-overlapping sequences from the start of the split, at
-- most `max` of them. Returns their count.
function Dataset:val_count(t, max)
   return math.min(max or math.huge, math.floor((self.n_val - 1) / t))
end

-- Fills a batch of validation sequences first .. first + b - 1 (missing ones get targets -1).
function Dataset:val_batch(tokens, targets, first, count, b, t)
   local bytes, base = self.bytes, self.n_train
   for i = 0, b - 1 do
      local k = first + i
      local row = i * t
      for j = 0, t - 1 do
         if k < count then
            local at = base + k * t + j
            tokens[row + j] = bytes[at]
            targets[row + j] = bytes[at + 1]
         else
            tokens[row + j] = 0
            targets[row + j] = -1
         end
      end
   end
end

-- Text of the bytes [from, from + len) (for samples and tests).
function Dataset:text(from, len)
   return ffi.string(self.bytes + from, len)
end

return data
