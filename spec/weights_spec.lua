-- weights_spec.lua: lua/lwopt/weights.lua: safetensors tensors read as fp32 (F16's edge cases
-- exactly), and the dtypes of a file in words (the checks' messages: init_from_spec.lua).
local ffi = require("ffi")
local safetensors = require("lwopt.safetensors")
local weights = require("lwopt.weights")

describe("lw weights", function()
   it("widens F16's subnormals, infinities and NaN exactly", function()
      local path = os.tmpname()
      local bits = { 0x0001, 0x03ff, 0x0400, 0x7c00, 0xfc00, 0x7e00, 0xc000 }
      local data = ffi.new("uint16_t[?]", #bits, bits)
      safetensors.write(path, { { name = "x", count = #bits, data = data, dtype = "F16" },
         { name = "y", count = 1, data = ffi.new("float[1]", 0.5) } })
      local f = weights.open(path, "test")
      local x = weights.read(f, "x")
      local want = { 2 ^ -24, 1023 * 2 ^ -24, 2 ^ -14, math.huge, -math.huge }
      for i, v in ipairs(want) do assert.equal(v, x[i - 1]) end
      assert.is_true(x[5] ~= x[5]) -- NaN
      assert.equal(-2, x[6])
      assert.equal(0.5, weights.read(f, "y")[0])
      assert.equal("F16 + F32", weights.dtype_text(f))
      os.remove(path)
   end)
end)
