-- nn_rotary_spec.lua: nn.Rotary, rotary embeddings in place on a qkv activation's Q and K heads,
-- against a float64 reference written here, the published formulas of Hugging Face and nanochat,
-- and finite differences.
local ffi = require("ffi")
local lw = require("lwopt")
local nn = lw.nn
local h = require("nn_helpers")
local randoms, copy = h.randoms, h.copy

local C = require("lwopt.C")
local lib = C.lib

-- The float64 rotation of x (float* [b*t, width]) as m describes it, from position pos0: a table
-- of the rotated values, 0-based as x.
local function reference(m, x, b, t, pos0)
   local hd, width = m.head_dim, m:row_width()
   local halves = C.name("rope_pairing", m.pairing) == "halves"
   local y = {}
   for i = 0, b * t * width - 1 do y[i] = x[i] end
   for r = 0, b * t - 1 do
      local pos = r % t + pos0
      for head = 0, m.n_head + m.n_kv_head - 1 do
         for i = 0, hd / 2 - 1 do
            local angle = m.sign * pos * math.exp(-2 * i / hd * math.log(m.base))
            local c, s = math.cos(angle), math.sin(angle)
            local o = r * width + head * hd
            local ia = o + (halves and i or 2 * i)
            local ib = o + (halves and i + hd / 2 or 2 * i + 1)
            y[ia] = x[ia] * c - x[ib] * s
            y[ib] = x[ib] * c + x[ia] * s
         end
      end
   end
   return y
end

-- The worst |got - want| over n values, relative to max(1e-3, |want|).
local function worst(got, want, n)
   local w = 0
   for i = 0, n - 1 do
      w = math.max(w, math.abs(got[i] - want[i]) / math.max(1e-3, math.abs(want[i])))
   end
   return w
end

describe("nn.Rotary", function()
   local b, t, hd = 2, 5, 8

   it("rotates the Q and K heads as the float64 reference does, in both pairings and both "
      .. "directions, and leaves the V heads as they were", function()
      for _, pairing in ipairs({ "halves", "interleaved" }) do
         for _, sign in ipairs({ 1, -1 }) do
            local m = nn.Rotary.new{ head_dim = hd, n_head = 4, n_kv_head = 2, base = 500,
               pairing = pairing, sign = sign }
            local n = b * t * m:row_width()
            local x = randoms(n, 11)
            local want = reference(m, x, b, t, 3)
            local got = m:forward(copy(x, n), b, t, 3)
            assert.is_true(worst(got, want, n) < 1e-6, pairing .. " " .. sign)
            for r = 0, b * t - 1 do -- V: columns 6 hd .. 8 hd of each row, bit for bit
               for col = 6 * hd, 8 * hd - 1 do
                  assert.equal(x[r * 8 * hd + col], got[r * 8 * hd + col])
               end
            end
         end
      end
   end)

   it("is Hugging Face's q cos + rotate_half(q) sin with sign 1, and nanochat's y1 = x1 cos + "
      .. "x2 sin, y2 = -x1 sin + x2 cos with sign -1", function()
      local d = hd / 2
      for _, sign in ipairs({ 1, -1 }) do
         local m = nn.Rotary.new{ head_dim = hd, n_head = 1, n_kv_head = 1, sign = sign }
         local n = t * m:row_width()
         local x = randoms(n, 13)
         local got = m:forward(copy(x, n), 1, t)
         for r = 0, t - 1 do
            for head = 0, 1 do
               local o = r * m:row_width() + head * hd
               for i = 0, d - 1 do
                  -- both publish inv_freq = 1 / base^(2i / hd) and angles pos * inv_freq
                  local f = r / 10000 ^ (2 * i / hd)
                  local x1, x2 = x[o + i], x[o + i + d]
                  local y1, y2
                  if sign == 1 then -- cat(-x2, x1) is rotate_half; cos and sin repeat per half
                     y1 = x1 * math.cos(f) + (-x2) * math.sin(f)
                     y2 = x2 * math.cos(f) + x1 * math.sin(f)
                  else
                     y1 = x1 * math.cos(f) + x2 * math.sin(f)
                     y2 = x1 * (-math.sin(f)) + x2 * math.cos(f)
                  end
                  assert.near(y1, got[o + i], 1e-6)
                  assert.near(y2, got[o + i + d], 1e-6)
               end
            end
         end
      end
   end)

   it("continues a sequence from pos0: the second half of 2t rows is those rows alone from t",
      function()
      local m = nn.Rotary.new{ head_dim = hd, n_head = 2, pairing = "interleaved" }
      local w = m:row_width()
      local x = randoms(2 * t * w, 17)
      local whole = m:forward(copy(x, 2 * t * w), 1, 2 * t)
      local tail = m:forward(copy(x + t * w, t * w), 1, t, t)
      for i = 0, t * w - 1 do assert.equal(whole[t * w + i], tail[i]) end
   end)

   it("has the transpose of its forward as its backward (finite differences), which undoes "
      .. "the forward", function()
      for _, sign in ipairs({ 1, -1 }) do
         local m = nn.Rotary.new{ head_dim = hd, n_head = 3, n_kv_head = 1, sign = sign }
         local n = b * t * m:row_width()
         local x, r = randoms(n, 19), randoms(n, 23)
         local function loss(p) return h.dot(m:forward(copy(p, n), b, t, 2), r, n) end
         local dx = m:backward(x, copy(r, n), nil, b, t, 2)
         for i = 0, n - 1, 7 do
            local keep = x[i]
            x[i] = keep + 0.5
            local up = loss(x)
            x[i] = keep - 0.5
            local down = loss(x)
            x[i] = keep
            assert.near((up - down) / 1, dx[i], 1e-5)
         end
         local back = m:backward(x, m:forward(copy(x, n), b, t, 2), nil, b, t, 2)
         for i = 0, n - 1 do assert.near(x[i], back[i], 1e-6) end
      end
   end)

   it("rotates bf16 activations as their widening, rounded", function()
      local m = nn.Rotary.new{ head_dim = hd, n_head = 2 }
      local n = b * t * m:row_width()
      local x16, wide = ffi.new("uint16_t[?]", n), ffi.new("float[?]", n)
      local want16 = ffi.new("uint16_t[?]", n)
      assert.equal(0, lib.lw_vec_to_bf16(nil, x16, randoms(n, 29), n))
      assert.equal(0, lib.lw_vec_from_bf16(nil, wide, x16, n))
      assert.equal(0, lib.lw_vec_to_bf16(nil, want16, m:forward(wide, b, t), n))
      m.qkv_dtype = lib.LW_DTYPE_BF16
      m:forward(x16, b, t)
      for i = 0, n - 1 do assert.equal(want16[i], x16[i]) end
   end)

   it("refuses a bad head dim, pairing, base or direction, and an input gradient elsewhere",
      function()
      local function fails(opts, text)
         local ok, err = pcall(nn.Rotary.new, opts)
         assert.is_false(ok)
         assert.truthy(err:find(text, 1, true), err)
      end
      fails({ head_dim = 7, n_head = 2 }, "nn.Rotary: head_dim must be an even whole number")
      fails({ head_dim = 8, n_head = 2, pairing = "neox" },
         "unknown rope pairing 'neox' (one of halves, interleaved)")
      fails({ head_dim = 8, n_head = 2, base = 0 }, "base must be a finite number > 0, got 0")
      fails({ head_dim = 8, n_head = 2, sign = 2 }, "sign must be 1")
      fails({ head_dim = 8 }, "n_head and n_kv_head must be whole numbers >= 1")
      local m = nn.Rotary.new{ head_dim = 8, n_head = 1 }
      local g = randoms(24, 3)
      assert.has_error(function() m:backward(g, g, randoms(24, 5), 1, 1) end)
   end)
end)
