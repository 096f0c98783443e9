-- nn_qk_norm_spec.lua: nn.QKNorm, the parameter-free RMS norm in place on a qkv activation's Q
-- and K heads, against a float64 reference written here and finite differences.
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")
local randoms, copy = h.randoms, h.copy

describe("nn.QKNorm", function()
   local b, t, hd, n_head, n_kv = 2, 3, 8, 4, 2
   local width = (n_head + 2 * n_kv) * hd

   it("normalises each Q and K head to a root mean square of 1 as the float64 reference does, "
      .. "and leaves the V heads as they were", function()
      local m = nn.QKNorm.new{ head_dim = hd, n_head = n_head, n_kv_head = n_kv, eps = 1e-6 }
      local n = b * t * width
      local x = randoms(n, 31)
      local y = m:forward(copy(x, n), b, t)
      for r = 0, b * t - 1 do
         for head = 0, n_head + 2 * n_kv - 1 do
            local o = r * width + head * hd
            if head < n_head + n_kv then
               local s = 0
               for i = 0, hd - 1 do s = s + x[o + i] ^ 2 end
               local rstd = 1 / math.sqrt(s / hd + 1e-6)
               assert.near(rstd, m.rstd[r * (n_head + n_kv) + head], 1e-6 * rstd)
               for i = 0, hd - 1 do assert.near(x[o + i] * rstd, y[o + i], 1e-6) end
            else
               for i = 0, hd - 1 do assert.equal(x[o + i], y[o + i]) end
            end
         end
      end
   end)

   it("has the gradient of its forward as its backward (finite differences)", function()
      local m = nn.QKNorm.new{ head_dim = hd, n_head = n_head, n_kv_head = n_kv }
      assert.equal(2 ^ -23, m.eps) -- torch's rms_norm's for fp32 when given none
      local n = b * t * width
      local x, r = randoms(n, 37), randoms(n, 41)
      local function loss(p) return h.dot(m:forward(copy(p, n), b, t), r, n) end
      local y = m:forward(copy(x, n), b, t)
      local dx = m:backward(y, copy(r, n), nil, b, t)
      for i = 0, n - 1, 5 do
         local keep = x[i]
         x[i] = keep + 1e-3
         local up = loss(x)
         x[i] = keep - 1e-3
         local down = loss(x)
         x[i] = keep
         assert.near((up - down) / 2e-3, dx[i], 2e-3 * math.max(1, math.abs(dx[i])))
      end
   end)

   it("commutes with nn.Rotary: a rotation keeps each head's norm", function()
      local q = nn.QKNorm.new{ head_dim = hd, n_head = n_head, n_kv_head = n_kv }
      local rot = nn.Rotary.new{ head_dim = hd, n_head = n_head, n_kv_head = n_kv }
      local n = b * t * width
      local x = randoms(n, 43)
      local a = q:forward(rot:forward(copy(x, n), b, t), b, t)
      local c = rot:forward(q:forward(copy(x, n), b, t), b, t)
      for i = 0, n - 1 do assert.near(a[i], c[i], 1e-6) end
   end)

   it("refuses a bad head dim or eps", function()
      local ok, err = pcall(nn.QKNorm.new, { head_dim = 0, n_head = 2 })
      assert.is_false(ok)
      assert.truthy(err:find("nn.QKNorm: head_dim, n_head and n_kv_head must be whole", 1, true))
      ok, err = pcall(nn.QKNorm.new, { head_dim = 8, n_head = 2, eps = -1 })
      assert.is_false(ok)
      assert.truthy(err:find("eps must be a finite number >= 0, got -1", 1, true))
   end)
end)
