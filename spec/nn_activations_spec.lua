-- nn_activations_spec.lua: the MLP activations beside GELU, nn.ReLU2 (nn/relu2.lua) and
-- nn.SwiGLU (nn/swiglu.lua): no parameters, their widths, their forwards against float64 and
-- their backwards against float64 central differences.
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")

-- y = max(x, 0)^2, in float64
local function relu2(x)
   local y = {}
   for i = 1, #x do y[i] = math.max(x[i], 0) ^ 2 end
   return y
end

-- y = silu(a) b over rows [a | b] of 2 w, in float64
local function swiglu(w)
   return function(x)
      local y = {}
      for row = 0, #x / (2 * w) - 1 do
         for j = 1, w do
            local a, b = x[row * 2 * w + j], x[row * 2 * w + w + j]
            y[row * w + j] = a / (1 + math.exp(-a)) * b
         end
      end
      return y
   end
end

describe("the MLP activations", function()
   it("declare no parameters and take rows of their widths (SwiGLU's input twice its output)",
      function()
      for _, m in ipairs({ nn.ReLU2.new(5), nn.SwiGLU.new(5) }) do
         assert.same({}, m:parameters())
         assert.same({ "n" }, getmetatable(m).shape_args)
      end
      assert.equal(5, nn.ReLU2.new(5).in_width)
      assert.equal(10, nn.SwiGLU.new(5).in_width)
   end)

   -- an activation's float rounding (a few ulps: measured below 2e-7) against float64; a term
   -- dropped from a derivative is off by O(0.1)
   it("ReLU2 squares the positive part, with float64's results and gradient", function()
      local err = h.against_reference(nn.ReLU2.new(6), 4, 6, 6, relu2)
      assert.is_true(err.y < 1e-6, "y " .. err.y)
      assert.is_true(err.dx < 1e-5, "dx " .. err.dx)
   end)

   it("SwiGLU gates the up half by silu of the gate half, with float64's results and fused "
      .. "gradient", function()
      local err = h.against_reference(nn.SwiGLU.new(5), 3, 10, 5, swiglu(5))
      assert.is_true(err.y < 1e-6, "y " .. err.y)
      assert.is_true(err.dx < 1e-5, "dx " .. err.dx)
   end)
end)
