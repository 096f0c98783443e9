-- data_spec.lua: byte-level data: the split, deterministic batches that do not depend on how
-- the global batch is divided, the validation set, and errors.
local ffi = require("ffi")
local lw = require("lwopt")
local helpers = require("helpers")

describe("lw.data", function()
   local text = {}
   for i = 1, 2000 do text[i] = string.char(32 + (i * 7) % 90) end
   local path = helpers.tempfile(table.concat(text))
   local d = lw.data.load(path, { seq_len = 8 })

   it("splits the last 5% off for validation", function()
      assert.equal(2000, d.n)
      assert.equal(100, d.n_val)
      assert.equal(1900, d.n_train)
      assert.equal(table.concat(text):sub(1, 5), d:text(0, 5))
   end)

   it("gives the same global batch however it is split across ranks and micro-steps", function()
      -- each sequence whole: its tokens and targets
      local function row(tokens, targets, i)
         local s = {}
         for j = 0, 7 do s[#s + 1] = tokens[i * 8 + j] .. ">" .. targets[i * 8 + j] end
         return table.concat(s, ",")
      end
      local function global(ranks, accum, b)
         return helpers.global_batch(d, ranks, accum, b, row)
      end
      local one = global(1, 6, 2)
      assert.equal(12, #one)
      assert.same(one, global(2, 3, 2))
      assert.same(one, global(3, 2, 2))
      -- of different sequences, not one repeated (which any split would also give alike)
      local distinct, count = {}, 0
      for _, r in ipairs(one) do
         if not distinct[r] then distinct[r], count = true, count + 1 end
      end
      assert.is_true(count > 6)
   end)

   it("targets are the next bytes, and steps and seeds change the batch", function()
      local tokens, targets = ffi.new("int32_t[16]"), ffi.new("int32_t[16]")
      d:train_batch(tokens, targets, 1, 1, 0, 0, 1, 2, 8)
      for j = 0, 6 do assert.equal(tokens[j + 1], targets[j]) end
      local first = tokens[0] * 1000 + tokens[1]
      local offsets = {}
      for step = 1, 20 do offsets[d:offset(1, step, 0, 8)] = true end
      local distinct = 0
      for _ in pairs(offsets) do distinct = distinct + 1 end
      assert.is_true(distinct > 15)
      assert.not_equal(d:offset(1, 1, 0, 8), d:offset(2, 1, 0, 8))
      assert.is_number(first)
   end)

   it("reads validation sequences from the held-out end, marking missing rows ignored", function()
      local count = d:val_count(8, 1000)
      assert.equal(math.floor(99 / 8), count)
      local tokens, targets = ffi.new("int32_t[32]"), ffi.new("int32_t[32]")
      d:val_batch(tokens, targets, count - 2, count, 4, 8)
      assert.equal(d.bytes[d.n_train + (count - 2) * 8], tokens[0])
      assert.equal(-1, targets[2 * 8])
      assert.equal(-1, targets[31])
   end)

   it("names a missing file and a file too small", function()
      assert.has_error(function() lw.data.load("/nonexistent/x.txt", { hint = ". Try make data" }) end,
         "lw.data: cannot read '/nonexistent/x.txt' (/nonexistent/x.txt: No such file or directory). Try make data")
      local tiny = helpers.tempfile("abc")
      assert.has_error(function() lw.data.load(tiny, { seq_len = 8 }) end,
         "lw.data: '" .. tiny .. "' has 3 bytes, too few for sequences of 8 with a 5% validation split")
      os.remove(tiny)
   end)

   it("names a directory, and a file too large to read whole", function()
      assert.has_error(function() lw.data.load("/tmp") end,
         "lw.data: cannot read '/tmp': it is a directory, not a text file")
      local big = os.tmpname()
      helpers.sh("truncate -s 3G " .. big) -- sparse: no disk is used
      assert.has_error(function() lw.data.load(big) end, "lw.data: '" .. big .. "' has 3.00 GiB; "
         .. "this loader reads text files of up to 2 GiB (a LuaJIT string's limit): use a part of it")
      os.remove(big)
   end)
end)
