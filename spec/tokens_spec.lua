-- tokens_spec.lua: token shards (llm.c's format, both versions) as a dataset: one sequence
-- across shards, the batch order of lw.data, the validation split (--val-data, train -> val,
-- the last 5%), wildcard patterns, and errors that name the file: bad shards, a token outside
-- the vocabulary, too few tokens.
local ffi = require("ffi")
local lw = require("lwopt")
local helpers = require("helpers")
local files = require("lwopt.files")

-- A fresh temporary directory.
local function temp_dir()
   local dir = helpers.fresh_path()
   files.make_dir(dir)
   return dir
end

-- ids first, first + 1, ... (mod 997) for n tokens.
local function run_of(first, n)
   local ids = {}
   for i = 1, n do ids[i] = (first + i - 1) % 997 end
   return ids
end

describe("lw.tokens", function()
   local dir
   before_each(function() dir = temp_dir() end)
   after_each(function() files.remove_tree(dir) end)

   -- Training shards of 5, 7 and 1100 tokens (versions 1, 2, 1): global token g is g % 997.
   local function train_shards()
      helpers.token_shard(run_of(0, 5), { path = dir .. "/x_train_000.bin" })
      helpers.token_shard(run_of(5, 7), { path = dir .. "/x_train_001.bin", version = 2 })
      helpers.token_shard(run_of(12, 1100), { path = dir .. "/x_train_002.bin" })
      return dir .. "/x_train_*.bin"
   end

   it("reads shards of both versions as one sequence, across shard boundaries", function()
      local d = lw.tokens.open(train_shards(), { vocab = 1000, seq_len = 8 })
      assert.equal("tokens", d.kind)
      assert.equal(1112, d.n)
      assert.equal(55, d.n_val) -- no x_val_*: the last 5%
      assert.equal(1057, d.n_train)
      assert.equal(1000, d.vocab)
      local tokens, targets = ffi.new("int32_t[16]"), ffi.new("int32_t[16]")
      local crossed = 0
      for step = 1, 300 do
         d:train_batch(tokens, targets, 7, step, 0, 0, 1, 2, 8)
         for i = 0, 1 do
            local at = d:offset(7, step, i, 8)
            if at < 12 then crossed = crossed + 1 end -- starts in one of the short shards
            for j = 0, 7 do
               assert.equal((at + j) % 997, tokens[i * 8 + j])
               assert.equal((at + j + 1) % 997, targets[i * 8 + j])
            end
         end
      end
      assert.is_true(crossed > 0)
   end)

   it("draws the batches of lw.data: the same however they are split across ranks", function()
      local d = lw.tokens.open(train_shards(), { vocab = 1000, seq_len = 8 })
      local function first(tokens, _, i) return tokens[i * 8] end -- a sequence's first token
      local function global(ranks, accum, b)
         return helpers.global_batch(d, ranks, accum, b, first)
      end
      local one = global(1, 6, 2)
      assert.same(one, global(2, 3, 2))
      assert.same(one, global(3, 2, 2))
      for k = 0, 11 do
         assert.equal(lw.data.offset(d.n_train, 42, 3, k, 8) % 997, one[k + 1])
      end
   end)

   it("takes the validation split from the train -> val shards when they exist", function()
      local pattern = train_shards()
      helpers.token_shard(run_of(500, 300), { path = dir .. "/x_val_000.bin" })
      assert.equal(dir .. "/x_val_*.bin", lw.tokens.val_pattern(pattern))
      local d = lw.tokens.open(pattern, { vocab = 1000, seq_len = 8 })
      assert.equal(dir .. "/x_val_*.bin", d.val_path)
      assert.equal(1112, d.n_train)
      assert.equal(300, d.n_val)
      assert.equal(1412, d.n)
      assert.equal(math.floor(299 / 8), d:val_count(8))
      local tokens, targets = ffi.new("int32_t[32]"), ffi.new("int32_t[32]")
      d:val_batch(tokens, targets, 1, 3, 4, 8)
      assert.equal(508, tokens[0]) -- sequence 1 starts at token 8 of the validation shard
      assert.equal(509, targets[0])
      assert.equal(-1, targets[2 * 8]) -- past count: ignored
      assert.same({ 500, 501, 502 }, d:val_tokens(3))
   end)

   it("takes --val-data when given, and the last 5% without train -> val files", function()
      local pattern = train_shards()
      helpers.token_shard(run_of(900, 40), { path = dir .. "/held_out.bin", version = 2 })
      local d = lw.tokens.open(pattern, { vocab = 1000, seq_len = 8, val = dir .. "/held_out.bin" })
      assert.equal(40, d.n_val)
      assert.same({ 900, 901 }, d:val_tokens(2))
      -- no "train" in the name: the last 5% of the same shards
      os.rename(dir .. "/x_train_002.bin", dir .. "/y_002.bin")
      d = lw.tokens.open(dir .. "/y_*.bin", { vocab = 1000, seq_len = 8 })
      assert.is_nil(d.val_path)
      assert.is_nil(lw.tokens.val_pattern(dir .. "/y_*.bin"))
      assert.equal(55, d.n_val)
      assert.same({ (12 + 1045) % 997 }, d:val_tokens(1))
      local tokens, targets = ffi.new("int32_t[8]"), ffi.new("int32_t[8]")
      d:val_batch(tokens, targets, 0, 1, 1, 8)
      assert.equal((12 + 1045) % 997, tokens[0])
   end)

   it("expands a pattern over one directory level, sorted, and names one that matches nothing",
      function()
         for _, name in ipairs({ "s_10.bin", "s_02.bin", "s_1.bin", ".s_0.bin", "t_0.bin" }) do
            helpers.token_shard({ 1, 2 }, { path = dir .. "/" .. name })
         end
         assert.same({ dir .. "/s_02.bin", dir .. "/s_1.bin", dir .. "/s_10.bin" },
            lw.tokens.expand(dir .. "/s_*.bin"))
         assert.same({ dir .. "/s_1.bin", dir .. "/t_0.bin" },
            lw.tokens.expand(dir .. "/[st]_?.bin"))
         assert.same({ dir .. "/missing.bin" }, lw.tokens.expand(dir .. "/missing.bin"))
         assert.has_error(function() lw.tokens.expand(dir .. "/u_*.bin") end,
            "lw.tokens: no file matches '" .. dir .. "/u_*.bin'")
         assert.has_error(function() lw.tokens.expand(dir .. "/*/s.bin") end, "files.glob: '"
            .. dir .. "/*/s.bin': wildcards may stand in the file name only, not in the directory")
         assert.is_true(lw.tokens.is_shards("a/fineweb_train_*.bin"))
         assert.is_true(lw.tokens.is_shards("a/one.bin"))
         assert.is_false(lw.tokens.is_shards("data/kjv.txt"))
      end)

   it("names the file of a truncated, foreign or mislabelled shard", function()
      local good = helpers.token_shard(run_of(0, 100), { path = dir .. "/a_000.bin" })
      local function fails(opts, message)
         local bad = helpers.token_shard(run_of(0, 100), opts)
         assert.has_error(function() lw.tokens.open(dir .. "/*.bin") end,
            "lw.tokens: token_shards: " .. bad .. ": " .. message)
         os.remove(bad)
      end
      fails({ path = dir .. "/b_001.bin", count = 120 },
         "truncated: header says 120 tokens, file holds 100")
      fails({ path = dir .. "/b_001.bin", magic = 20240801 },
         "not a token shard (magic 20240801, expected 20240520)")
      fails({ path = dir .. "/b_001.bin", version = 2, size = 2 }, "truncated: header says 100 "
         .. "tokens, file holds 50 (the size fits version 1 tokens: a mislabelled shard?)")
      fails({ path = dir .. "/b_001.bin", version = 7 },
         "unknown version 7 (1: uint16 tokens, 2: uint32 tokens)")
      assert.has_error(function() lw.tokens.open(dir .. "/none.bin") end,
         "lw.tokens: token_shards: cannot open " .. dir .. "/none.bin: No such file or directory")
      assert.equal(100, lw.tokens.open(good, { seq_len = 2 }).n)
   end)

   it("names the shard and the token when a batch holds a token outside the vocabulary",
      function()
         local ids = {}
         for i = 1, 400 do ids[i] = i % 50 end
         ids[201] = 50300 -- the only one: in the training split, at position 200
         local path = helpers.token_shard(ids, { path = dir .. "/big.bin", version = 2 })
         local d = lw.tokens.open(path, { vocab = 50257, seq_len = 8, hint = " (set --vocab)" })
         local tokens, targets = ffi.new("int32_t[64]"), ffi.new("int32_t[64]")
         assert.has_error(function()
            for step = 1, 1000 do d:train_batch(tokens, targets, 1, step, 0, 0, 1, 8, 8) end
         end, "lw.tokens: token_shards: " .. path .. ": token 50300 at position 200 is outside "
            .. "the vocabulary [0, 50257) (set --vocab)")
         -- the same data with a vocabulary that holds it reads every batch
         d = lw.tokens.open(path, { vocab = 50304, seq_len = 8 })
         for step = 1, 50 do d:train_batch(tokens, targets, 1, step, 0, 0, 1, 8, 8) end
      end)

   it("refuses too few tokens for the sequence length, and a vocabulary that is not one",
      function()
         local path = helpers.token_shard(run_of(0, 100), { path = dir .. "/s.bin" })
         assert.has_error(function() lw.tokens.open(path, { seq_len = 8 }) end, "lw.tokens: '"
            .. path .. "' has 100 tokens, too few for sequences of 8 with a 5% validation split")
         assert.has_error(function() lw.tokens.open(path, { vocab = 0 }) end,
            "lw.tokens: vocab must be a whole number >= 1, got 0")
      end)
end)
