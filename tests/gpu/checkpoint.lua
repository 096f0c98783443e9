-- checkpoint.lua: a checkpoint written from GPU buffers loads on the CPU, and one written on the
-- CPU loads into GPU buffers (at ZeRO-3 there, so it reshards too): parameters and optimizer
-- state arrive bit for bit, and the next step on either device agrees within 1e-5 (fp32
-- Newton-Schulz on the GPU against the CPU's). Exit 77 (skipped) when CUDA is not available.
-- Usage (ctest -L gpu): bin/lwopt run tests/gpu/checkpoint.lua [DEVICE]; DEVICE (default
-- "cuda") = "cpu" runs the same checks CPU against CPU, to check this script without a GPU.
local ffi = require("ffi")
local lw = require("lwopt")
local C = require("lwopt.C")
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

local GPU = dofile("tests/gpu/require_gpu.lua")("tests/gpu/checkpoint.lua")

local dir = os.tmpname()
os.remove(dir)
local comm = lw.comm.self()
-- two layers: four same-shaped matrices of each kind, so the GPU batches Newton-Schulz
local specs = lw.nn.GPT.new{ n_layer = 2, n_embd = 32, n_head = 2, vocab = 64, seq_len = 16 }
   :parameters()

local function build(device, zero)
   local ddp = lw.ddp.new(specs, comm, { device = device, zero = zero, bucket_size = 8192 })
   local opt = lw.optim.new(ddp, { lr = 1e-2, weight_decay = 0.1, clip = 1.0,
      muon = { precision = "fp32" } })
   return ddp, opt
end

local function numel(spec)
   local n = 1
   for _, d in ipairs(spec.shape) do n = n * d end
   return n
end

-- One step with the gradients of step k, written into the device's gradient views the way a
-- backward pass reaches them (acquire, write, release, ready), in backprop order.
local function step(ddp, opt, k)
   ddp:zero_grad()
   for i = #ddp.specs, 1, -1 do
      local spec = ddp.specs[i]
      local n = numel(spec)
      local host = ffi.new("float[?]", n)
      for e = 0, n - 1 do host[e] = e % 11 == 3 and 0 or math.cos(0.37 * i + 0.013 * e + k) end
      local _, g = ddp:acquire(spec.name, "backward")
      ddp:from_host(g, host, n)
      ddp:release(spec.name)
      ddp:grad_ready(spec.name)
   end
   ddp:end_backward()
   local r = opt:step()
   expect(r.ok, "step " .. k .. " was applied")
   return r
end

local function params(ddp)
   local out = {}
   for _, spec in ipairs(ddp.specs) do out[spec.name] = ddp:read_param(spec.name):totable() end
   return out
end

-- This rank's optimizer state, copied to the host: name -> { m = {...}, v = {...} }.
local function state(ddp, opt)
   local out, entry = {}, ffi.new("lw_state_entry")
   for k = 0, C.lib.lw_optimizer_state_count(opt._c) - 1 do
      C.check(C.lib.lw_optimizer_state(opt._c, k, entry), "state")
      local count = tonumber(entry.count)
      local s = { m = {}, v = {} }
      local m = ddp:to_host(entry.m, count)
      local v = entry.v ~= nil and ddp:to_host(entry.v, count) or nil
      for e = 0, count - 1 do
         s.m[e + 1] = m[e]
         if v then s.v[e + 1] = v[e] end
      end
      out[ddp.specs[entry.param + 1].name] = s
   end
   return out
end

-- The largest |a - b| over every list of two maps of lists, and whether their keys agree.
local function max_diff(a, b)
   local worst, same_keys = 0, true
   for name, x in pairs(a) do
      local y = b[name]
      if y == nil then same_keys = false else
         local xs, ys = x.m and { x.m, x.v } or { x }, y.m and { y.m, y.v } or { y }
         for j = 1, #xs do
            if #xs[j] ~= #ys[j] then same_keys = false end
            for e = 1, #xs[j] do
               local d = math.abs(xs[j][e] - (ys[j][e] or math.huge))
               if not (d <= worst) then worst = d end
            end
         end
      end
   end
   for name in pairs(b) do same_keys = same_keys and a[name] ~= nil end
   return worst, same_keys
end

local function init(ddp)
   for i, spec in ipairs(ddp.specs) do
      ddp:write_param(spec.name, function(e)
         return spec.role == "norm" and 1 or 0.05 * math.sin(0.7 * i + 0.11 * e)
      end)
   end
end

local ok, err = pcall(function()
   -- 1. train two steps on the GPU and save
   local gddp, gopt = build(GPU, 1)
   init(gddp)
   step(gddp, gopt, 1)
   step(gddp, gopt, 2)
   local path = lw.checkpoint.save(dir, { ddp = gddp, opt = gopt, step = 2 })
   local saved_params, saved_state = params(gddp), state(gddp, gopt)

   -- 2. the CPU loads it bit for bit, then both take step 3 and agree
   local cddp, copt = build("cpu", 1)
   local m = lw.checkpoint.load(path, { ddp = cddp, opt = copt })
   expect(m.step == 2, "the manifest's step is 2")
   local d, same = max_diff(params(cddp), saved_params)
   expect(same and d == 0, ("GPU -> CPU: parameters bit for bit (max diff %g)"):format(d))
   d, same = max_diff(state(cddp, copt), saved_state)
   expect(same and d == 0, ("GPU -> CPU: optimizer state bit for bit (max diff %g)"):format(d))
   local gr, cr = step(gddp, gopt, 3), step(cddp, copt, 3)
   expect(math.abs(gr.grad_norm - cr.grad_norm) <= 1e-6 * cr.grad_norm, "step 3: the same norm")
   expect(gr.step == 3 and cr.step == 3, "step 3: three updates counted on both")
   d = max_diff(params(gddp), params(cddp))
   expect(d <= 1e-5, ("step 3 on GPU and CPU within 1e-5 (max diff %g)"):format(d))
   local moved = max_diff(params(cddp), saved_params)
   expect(moved > 1e-4, "step 3 moved the parameters")

   -- 3. the CPU saves; GPU buffers at ZeRO-3 load it bit for bit, and step 4 agrees
   local cpath = lw.checkpoint.save(dir, { ddp = cddp, opt = copt, step = 3 })
   local cpu_params, cpu_state = params(cddp), state(cddp, copt)
   local zddp, zopt = build(GPU, 3)
   lw.checkpoint.load(cpath, { ddp = zddp, opt = zopt })
   d, same = max_diff(params(zddp), cpu_params)
   expect(same and d == 0, ("CPU -> GPU ZeRO-3: parameters bit for bit (max diff %g)"):format(d))
   d, same = max_diff(state(zddp, zopt), cpu_state)
   expect(same and d == 0, ("CPU -> GPU ZeRO-3: optimizer state bit for bit (max diff %g)")
      :format(d))
   step(zddp, zopt, 4)
   step(cddp, copt, 4)
   d = max_diff(params(zddp), params(cddp))
   expect(d <= 1e-5, ("step 4 on GPU (ZeRO-3) and CPU within 1e-5 (max diff %g)"):format(d))
end)
expect(ok, "the round trip ran: " .. tostring(err))
os.execute("rm -rf '" .. dir .. "'")
tally.finish("tests/gpu/checkpoint.lua")
