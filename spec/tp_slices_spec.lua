-- tp_slices_spec.lua: a TP rank's local tensor within the full one (lw.tp_slices).
local ffi = require("ffi")
local tp_slices = require("lwopt.tp_slices")

-- The full tensor's values 0..n-1 split into t local tensors by runs, then put back together.
local function split(spec, t)
   local n = 1
   for _, d in ipairs(spec.full_shape) do n = n * d end
   local full = ffi.new("float[?]", n)
   for i = 0, n - 1 do full[i] = i end
   local parts = {}
   for r = 0, t - 1 do
      local m = n / t
      local part = ffi.new("float[?]", m)
      assert.equal(m, tp_slices.from_full(spec, t, r, full, 0, m, part))
      local list = {}
      for i = 0, m - 1 do list[#list + 1] = part[i] end
      parts[r + 1] = list
   end
   return parts, n
end

describe("lw.tp_slices", function()
   it("gives each TP rank its piece of every block of a fused QKV weight's rows", function()
      -- 6 rows [Q0 Q1; K0 K1; V0 V1] of 2 columns: rank 0 holds Q0 K0 V0, rank 1 Q1 K1 V1
      local spec = { name = "qkv", full_shape = { 6, 2 }, tp = { dim = 0, blocks = 3 } }
      local parts = split(spec, 2)
      assert.same({ 0, 1, 4, 5, 8, 9 }, parts[1])
      assert.same({ 2, 3, 6, 7, 10, 11 }, parts[2])
   end)

   it("gives each TP rank its columns of a row-parallel weight, row by row", function()
      local spec = { name = "proj", full_shape = { 2, 4 }, tp = { dim = 1 } }
      local parts = split(spec, 2)
      assert.same({ 0, 1, 4, 5 }, parts[1])
      assert.same({ 2, 3, 6, 7 }, parts[2])
   end)

   it("splits a column-parallel bias and leaves a replicated tensor whole", function()
      local bias = { name = "b", full_shape = { 6 }, tp = { dim = 0 } }
      assert.same({ { 0, 1, 2 }, { 3, 4, 5 } }, (split(bias, 2)))
      local gain = { name = "g", shape = { 5 } }
      assert.same({ { 0, 0, 5 } }, tp_slices.runs(gain, 2, 1))
   end)

   it("puts every rank's partial ranges back into the full tensor and says what it covered", function()
      local spec = { name = "w", full_shape = { 3, 6 }, tp = { dim = 1, blocks = 3 } }
      local t, n = 2, 18
      local full, seen = ffi.new("float[?]", n), ffi.new("uint8_t[?]", n)
      -- rank 0's local elements [2, 9) and rank 1's [0, 9): local tensors are 3 x 3
      for _, part in ipairs({ { 0, 2, 9 }, { 1, 0, 9 } }) do
         local r, lo, hi = part[1], part[2], part[3]
         local src = ffi.new("float[?]", hi - lo)
         for i = lo, hi - 1 do src[i - lo] = 100 * r + i end
         assert.equal(hi - lo, tp_slices.to_full(spec, t, r, src, lo, hi, full, seen))
      end
      local dst = ffi.new("float[9]")
      -- rank 0's first two local elements were never written
      assert.equal(7, tp_slices.from_full(spec, t, 0, full, 0, 9, dst, seen))
      assert.equal(9, tp_slices.from_full(spec, t, 1, full, 0, 9, dst, seen))
      for i = 0, 8 do assert.equal(100 + i, dst[i]) end
   end)

   it("refuses a split that does not divide, naming the numbers", function()
      local spec = { name = "w", full_shape = { 6, 2 }, tp = { dim = 0, blocks = 3 } }
      assert.equal("'w': its 6 rows do not split into 3 blocks of 4 equal pieces",
         tp_slices.check(spec, 4))
      assert.has_error(function() tp_slices.runs(spec, 4, 0) end,
         "lw.tp_slices: 'w': its 6 rows do not split into 3 blocks of 4 equal pieces")
   end)
end)
