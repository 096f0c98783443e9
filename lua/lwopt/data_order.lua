-- data_order.lua: the order a dataset's training sequences are read in. "random" (a dataset
-- without an order): windows at offsets drawn from (seed, step, k), lw.data.offset. "sequential"
-- (this module): the training split read from its start as llm.c's and nanoGPT's loaders read
-- it, shard after shard, in consecutive sequences of t tokens (each sequence's last target is
-- the next one's first token), so that an epoch reads every token but a short tail once, and
-- then wraps to the first shard. Rank r of R reads the r-th block of each global batch
-- (lw.data.sequence). Sequence k of step s is the run's (start + (s - start_step) x global + k)-th,
-- so the position is a function of the step and the global batch; a checkpoint keeps
-- order:after(step), which a resumed run starts from, at any rank count or global batch.
local errors = require("lwopt.errors")

local data_order = {}

local fail = errors.failer("lw.data_order")

-- The orders, the default first.
data_order.NAMES = { "random", "sequential" }

local Sequential = {}
Sequential.__index = Sequential

local function whole(x, min) return type(x) == "number" and x == math.floor(x) and x >= min end

-- Sequences of t tokens an epoch of a training split of n_train tokens holds: the last one's
-- targets end at the split's last token.
function data_order.per_epoch(n_train, t)
   return math.floor((n_train - 1) / t)
end

-- data_order.sequential(dataset, opts): the sequential order over dataset's training split
-- (lw.data's or lw.tokens' dataset: n_train, and locate for positions). opts: seq_len (t),
-- global_batch (sequences a step reads over every data-parallel rank), start_step (the first
-- step of this run; 1), start (sequences the run read before start_step; 0: the data's start).
function data_order.sequential(dataset, opts)
   local t, g = opts.seq_len, opts.global_batch
   local start_step, start = opts.start_step or 1, opts.start or 0
   if not whole(t, 1) then fail("seq_len must be a whole number >= 1, got %s", tostring(t)) end
   if not whole(g, 1) then
      fail("global_batch must be a whole number >= 1, got %s", tostring(g))
   end
   if not whole(start_step, 1) then
      fail("start_step must be a whole number >= 1, got %s", tostring(start_step))
   end
   if not whole(start, 0) then
      fail("start must be a whole number >= 0, got %s", tostring(start))
   end
   local m = data_order.per_epoch(dataset.n_train, t)
   if m < 1 then
      fail("a training split of %d tokens holds no sequence of %d and its targets",
         dataset.n_train, t)
   end
   return setmetatable({ name = "sequential", dataset = dataset, t = t, global_batch = g,
      start_step = start_step, start = start, per_epoch = m }, Sequential)
end

-- The run's index (0-based, counting on over epochs) of sequence k of step `step`'s global batch.
function Sequential:index(step, k)
   return self.start + (step - self.start_step) * self.global_batch + k
end

-- Start offset in the training split of sequence k of step `step` (a sequence of t tokens).
function Sequential:offset(step, k, t)
   if t ~= self.t then
      errors.misuse("lw.data_order", "sequences of %d tokens asked of an order of %d", t, self.t)
   end
   return self:index(step, k) % self.per_epoch * self.t
end

-- Where the run's sequence n is: { order, epoch (1-based), sequence (0-based in its epoch),
-- token (its first token's offset in the training split), shard (path), shard_index (1-based),
-- shard_offset (the token's offset in that shard), sequences_per_epoch }.
function Sequential:position(n)
   local i = n % self.per_epoch
   local token = i * self.t
   local path, index, offset = self.dataset:locate(token)
   return { order = self.name, epoch = math.floor(n / self.per_epoch) + 1, sequence = i,
      token = token, shard = path, shard_index = index, shard_offset = offset,
      sequences_per_epoch = self.per_epoch }
end

-- The epoch (1-based) of step `step`'s last sequence: the step that wraps says the new one.
function Sequential:epoch(step)
   return math.floor(self:index(step, self.global_batch - 1) / self.per_epoch) + 1
end

-- The position the step after `step` reads from (what a checkpoint saved at `step` keeps).
function Sequential:after(step)
   return self:position(self:index(step + 1, 0))
end

-- The run's index to start from after a checkpoint's position (its epoch and sequence), on a
-- dataset with per_epoch sequences an epoch: a sequence past the end (other data) begins the
-- next epoch. nil when `saved` is not a sequential position.
function data_order.resumed_index(saved, per_epoch)
   if type(saved) ~= "table" or saved.order ~= "sequential" or not whole(saved.epoch, 1)
      or not whole(saved.sequence, 0) then
      return nil
   end
   local epochs = saved.epoch - 1
   if saved.sequence >= per_epoch then return (epochs + 1) * per_epoch end
   return epochs * per_epoch + saved.sequence
end

-- A position in words: "epoch 2, sequence 17 (fineweb_train_000003.bin, token 4352)".
function data_order.position_text(p, unit)
   return ("epoch %d, sequence %d (%s, %s %d)"):format(p.epoch, p.sequence,
      tostring(p.shard):match("([^/]*)$"), unit or "token", p.shard_offset)
end

return data_order
