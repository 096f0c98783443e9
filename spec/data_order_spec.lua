-- data_order_spec.lua: the sequential order of a dataset's training sequences (lw.data_order):
-- consecutive sequences from the start, rank r taking the r-th block of each global batch, every
-- token once an epoch and then a wrap to the first shard, token shards read in order across their
-- boundaries, and the position a checkpoint keeps continuing exactly, at another split or
-- global batch; the errors. Each batch is checked against the text or ids written in the test.
local ffi = require("ffi")
local lw = require("lwopt")
local helpers = require("helpers")
local files = require("lwopt.files")
local data_order = require("lwopt.data_order")

local T = 8

-- The rows a whole global batch of step `step` gets, split over ranks x accum micro-steps of b
-- rows, in the order of its sequences k: { { tokens = {..}, targets = {..} }, .. }.
local function global_batch(d, step, ranks, accum, b)
   local rows = {}
   local tokens, targets = ffi.new("int32_t[?]", b * T), ffi.new("int32_t[?]", b * T)
   for micro = 0, accum - 1 do
      for rank = 0, ranks - 1 do
         d:train_batch(tokens, targets, 99, step, micro, rank, ranks, b, T)
         for i = 0, b - 1 do
            local row = { tokens = {}, targets = {} }
            for j = 0, T - 1 do
               row.tokens[j + 1] = tokens[i * T + j]
               row.targets[j + 1] = targets[i * T + j]
            end
            rows[lw.data.sequence(micro, rank, ranks, b, i) + 1] = row
         end
      end
   end
   return rows
end

-- What sequence j of an epoch holds, read from `at(g)`: the split's g-th token.
local function expected(j, at)
   local row = { tokens = {}, targets = {} }
   for c = 1, T do
      row.tokens[c] = at(j * T + c - 1)
      row.targets[c] = at(j * T + c)
   end
   return row
end

describe("lw.data_order", function()
   -- 1000 bytes: a training split of 950, 118 sequences of 8 an epoch (the last 5 bytes unread)
   local text = {}
   for i = 1, 1000 do text[i] = string.char(33 + (i * 37 + i * i) % 90) end
   text = table.concat(text)
   local path = helpers.tempfile(text)
   local function byte_at(g) return text:byte(g + 1) end

   local function bytes(global, opts)
      local d = lw.data.load(path, { seq_len = T })
      opts = opts or {}
      d:set_order(data_order.sequential(d, { seq_len = T, global_batch = global,
         start_step = opts.start_step, start = opts.start }))
      return d
   end

   it("reads consecutive sequences from the split's start, each target the next byte", function()
      local d = bytes(6)
      assert.equal(118, d.order.per_epoch)
      for step = 1, 3 do
         local rows = global_batch(d, step, 1, 1, 6)
         for k = 0, 5 do
            assert.same(expected((step - 1) * 6 + k, byte_at), rows[k + 1])
         end
      end
   end)

   it("gives rank r of R the r-th block of each global batch, however it is split", function()
      local d = bytes(12)
      local one = global_batch(d, 4, 1, 1, 12)
      assert.same(one, global_batch(d, 4, 2, 3, 2))
      assert.same(one, global_batch(d, 4, 3, 2, 2))
      assert.same(one, global_batch(d, 4, 4, 1, 3))
      -- rank 1 of 2 at micro-step 0 with 2 rows a rank: sequences 2 and 3 of the step
      local tokens, targets = ffi.new("int32_t[16]"), ffi.new("int32_t[16]")
      d:train_batch(tokens, targets, 99, 4, 0, 1, 2, 2, T)
      assert.equal(byte_at((3 * 12 + 2) * T), tokens[0])
      assert.equal(byte_at((3 * 12 + 3) * T + 7), tokens[15])
   end)

   it("reads every token once an epoch, then wraps to the start and says the new epoch",
      function()
         local d = bytes(7)
         local m = d.order.per_epoch
         local seen = {}
         local step = 1
         -- the steps of epoch 1 (the last of them reads into epoch 2)
         while (step - 1) * 7 < m do
            for k = 0, 6 do
               local n = (step - 1) * 7 + k
               local at = d:offset(99, step, k, T)
               if n < m then
                  for g = at, at + T - 1 do seen[g] = (seen[g] or 0) + 1 end
               else
                  assert.equal((n - m) * T, at) -- epoch 2 starts over at the first token
               end
            end
            step = step + 1
         end
         for g = 0, m * T - 1 do assert.equal(1, seen[g], "token " .. g) end
         assert.is_nil(seen[m * T]) -- the short tail: 950 - 1 - 118 x 8 tokens never inputs
         assert.equal(17, math.ceil(m / 7))
         assert.equal(1, d.order:epoch(16))
         assert.equal(2, d.order:epoch(17)) -- step 17 reads sequences 112..118: the wrap
         assert.equal(2, d.order:epoch(18))
         assert.same(expected(0, byte_at), global_batch(d, 17, 1, 1, 7)[7])
      end)

   it("reads token shards in order, across their boundaries, and locates a position", function()
      local dir = helpers.fresh_path()
      files.make_dir(dir)
      local ids = {}
      local function shard(i, first, n, version)
         local list = {}
         for c = 1, n do
            list[c] = (first + c - 1) * 7 % 1000
            ids[first + c - 1] = list[c]
         end
         helpers.token_shard(list, { path = ("%s/s_train_%03d.bin"):format(dir, i),
            version = version })
      end
      shard(0, 0, 13, 1)
      shard(1, 13, 30, 2)
      shard(2, 43, 60, 1)
      helpers.token_shard({ 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 }, { path = dir .. "/s_val_000.bin" })
      local d = lw.tokens.open(dir .. "/s_train_*.bin", { vocab = 1000, seq_len = T })
      assert.equal(103, d.n_train) -- validation from s_val: every training token
      d:set_order(data_order.sequential(d, { seq_len = T, global_batch = 4 }))
      assert.equal(12, d.order.per_epoch)
      local function id_at(g) return ids[g] end
      for step = 1, 4 do
         local rows = global_batch(d, step, 2, 1, 2)
         for k = 0, 3 do
            local n = (step - 1) * 4 + k
            assert.same(expected(n % 12, id_at), rows[k + 1], "step " .. step .. " k " .. k)
         end
      end
      -- sequence 2 starts at token 16: shard 2 (13 tokens before it), offset 3
      local p = d.order:position(2)
      assert.same({ order = "sequential", epoch = 1, sequence = 2, token = 16,
         shard = dir .. "/s_train_001.bin", shard_index = 2, shard_offset = 3,
         sequences_per_epoch = 12 }, p)
      p = d.order:position(12 + 6) -- epoch 2, token 48: shard 3 at 5
      assert.same({ 2, 6, 48, 3, 5 }, { p.epoch, p.sequence, p.token, p.shard_index,
         p.shard_offset })
      assert.equal("epoch 2, sequence 6 (s_train_002.bin, token 5)",
         data_order.position_text(p))
      files.remove_tree(dir)
   end)

   it("continues from a checkpoint's position exactly, at another split or global batch",
      function()
         local whole = bytes(6)
         -- saved after step 4 (sequences 0..23 read), resumed at step 5
         local saved = whole.order:after(4)
         assert.same({ 1, 24, 192 }, { saved.epoch, saved.sequence, saved.token })
         local start = data_order.resumed_index(saved, 118)
         assert.equal(24, start)
         local resumed = bytes(6, { start_step = 5, start = start })
         for step = 5, 8 do
            assert.same(global_batch(whole, step, 1, 1, 6), global_batch(resumed, step, 3, 2, 1))
         end
         -- another global batch from step 5 goes on from the same sequence
         local other = bytes(4, { start_step = 5, start = start })
         assert.same(expected(24, byte_at), global_batch(other, 5, 1, 1, 4)[1])
         assert.same(expected(28, byte_at), global_batch(other, 6, 2, 2, 1)[1])
         -- a position in a later epoch, and one past the end of smaller data
         assert.equal(2 * 118 + 5, data_order.resumed_index({ order = "sequential", epoch = 3,
            sequence = 5 }, 118))
         assert.equal(3 * 118, data_order.resumed_index({ order = "sequential", epoch = 3,
            sequence = 500 }, 118))
         assert.is_nil(data_order.resumed_index(nil, 118))
         assert.is_nil(data_order.resumed_index({ order = "random" }, 118))
         assert.is_nil(data_order.resumed_index({ order = "sequential", epoch = 0,
            sequence = 1 }, 118))
      end)

   it("leaves random windows unchanged without an order, and goes back to them", function()
      local d = lw.data.load(path, { seq_len = T })
      local random = d:offset(99, 3, 1, T)
      assert.equal(lw.data.offset(d.n_train, 99, 3, 1, T), random)
      d:set_order(data_order.sequential(d, { seq_len = T, global_batch = 4 }))
      assert.equal((2 * 4 + 1) * T, d:offset(99, 3, 1, T))
      d:set_order(nil)
      assert.equal(random, d:offset(99, 3, 1, T))
   end)

   it("names a bad setting", function()
      local d = lw.data.load(path, { seq_len = T })
      assert.has_error(function() data_order.sequential(d, { seq_len = T, global_batch = 0 }) end,
         "lw.data_order: global_batch must be a whole number >= 1, got 0")
      assert.has_error(function() data_order.sequential(d, { seq_len = 2.5, global_batch = 1 })
      end, "lw.data_order: seq_len must be a whole number >= 1, got 2.5")
      assert.has_error(function() data_order.sequential(d, { seq_len = T, global_batch = 1,
         start = -1 }) end, "lw.data_order: start must be a whole number >= 0, got -1")
      assert.has_error(function() data_order.sequential({ n_train = 8 }, { seq_len = T,
         global_batch = 1 }) end,
         "lw.data_order: a training split of 8 tokens holds no sequence of 8 and its targets")
      d:set_order(data_order.sequential(d, { seq_len = T, global_batch = 1 }))
      assert.has_error(function() d:offset(1, 1, 0, 16) end)
   end)
end)
