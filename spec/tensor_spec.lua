-- tensor_spec.lua: views over lwopt-owned floats.
local ffi = require("ffi")
local tensor = require("lwopt.tensor")

describe("lw.tensor", function()
   local store = ffi.new("float[6]")
   local t = tensor.view(store, { 2, 3 }, store)

   it("views memory without copying", function()
      t:copy({ 1, 2, 3, 4, 5, 6 })
      assert.equal(6, t.numel)
      assert.equal(4, store[3])
      store[0] = 10
      assert.equal(10, t:at(1))
   end)

   it("fills, sums, takes norms and lists values", function()
      t:fill(2)
      assert.equal(12, t:sum())
      assert.near(math.sqrt(24), t:norm(), 1e-6)
      assert.same({ 2, 2, 2, 2, 2, 2 }, t:totable())
      t:copy(function(i) return i end)
      assert.equal("tensor{2, 3} [1, 2, 3, 4, 5, 6]", tostring(t))
   end)

   it("refuses mismatched sizes and indices", function()
      assert.has_error(function() t:copy({ 1 }) end)
      assert.has_error(function() t:at(7) end)
   end)
end)
