-- nn_rmsnorm_spec.lua: nn.RMSNorm (nn/rmsnorm.lua) with a gain and without: the parameters it
-- declares, its forward against float64 and its backward against float64 central differences,
-- and the options it refuses.
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")

-- y = x / sqrt(mean(x^2) + eps) * g per row of c, in float64 (g nil: no gain)
local function reference(c, eps)
   return function(x, p)
      local y, g = {}, p.weight
      for row = 0, #x / c - 1 do
         local ss = 0
         for j = 1, c do ss = ss + x[row * c + j] ^ 2 end
         local rstd = 1 / math.sqrt(ss / c + eps)
         for j = 1, c do y[row * c + j] = x[row * c + j] * rstd * (g and g[j] or 1) end
      end
      return y
   end
end

describe("nn.RMSNorm", function()
   it("declares its gain as a norm parameter, or with gain = false no parameter", function()
      local m = nn.RMSNorm.new("h.0.norm.", 6)
      assert.same({ "n" }, nn.RMSNorm.shape_args)
      local specs = m:parameters()
      assert.equal(1, #specs)
      assert.same({ 6 }, specs[1].shape)
      assert.equal("h.0.norm.weight", specs[1].name)
      assert.equal("norm", specs[1].role)
      assert.same({}, nn.RMSNorm.new("n.", 6, { gain = false }):parameters())
   end)

   it("normalises rows by their root mean square, times the gain, with float64's results and "
      .. "gradients", function()
      local err = h.against_reference(nn.RMSNorm.new("n.", 7), 5, 7, 7, reference(7, 1e-5))
      -- rstd and y a few float roundings (measured 1e-7); the gradients a few more, with the
      -- row's projection cancelling against dy g (3e-7); an eps of 1e-3 instead is off by 1e-2
      assert.is_true(err.y < 1e-6, "y " .. err.y)
      assert.is_true(err.dx < 1e-5, "dx " .. err.dx)
      assert.is_true(err.weight < 1e-5, "gain " .. err.weight)
   end)

   it("without a gain (nanochat's) normalises alone, with float64's results and input gradient",
      function()
      local m = nn.RMSNorm.new("n.", 33, { gain = false, eps = 1e-6 })
      local err = h.against_reference(m, 4, 33, 33, reference(33, 1e-6))
      assert.is_true(err.y < 1e-6, "y " .. err.y)
      assert.is_true(err.dx < 1e-5, "dx " .. err.dx)
   end)

   it("refuses an option it does not know, a gain that is not a boolean and a bad eps", function()
      assert.has_error(function() nn.RMSNorm.new("n.", 4, { gian = false }) end,
         "nn.RMSNorm n.: unknown option 'gian' (gain, eps)")
      assert.has_error(function() nn.RMSNorm.new("n.", 4, { gain = 0 }) end,
         "nn.RMSNorm n.: gain must be true or false, got 0")
      assert.has_error(function() nn.RMSNorm.new("n.", 4, { eps = -1 }) end,
         "nn.RMSNorm n.: eps must be a finite number >= 0, got -1")
   end)
end)
