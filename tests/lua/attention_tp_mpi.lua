-- attention_tp_mpi.lua: nn.CausalSelfAttention with grouped KV heads and a window under tensor
-- parallelism, under mpirun (ctest: 2 ranks, the world one TP group): 8 heads of 4 channels
-- reading 2 KV heads (one per rank), window 3, each rank's shards cut from the same full
-- parameters by their specs (lw.tp.from_model: the unequal Q, K and V blocks). The output, the
-- input gradient and each rank's parameter gradients (against the same slices of the full
-- ones) must agree with a one-rank module of the full parameters within 1e-5 (the all-reduces
-- sum the heads' contributions in another order: ~1e-7 apart). Prints "N passed, M failed";
-- exits non-zero on a failure.
local ffi = require("ffi")
local lw = require("lwopt")
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

lw.comm.run(function()
   local comm = lw.comm.init()
   local g = lw.tp.groups(comm, comm.size)
   local c, nh, b, t = 32, 8, 2, 7
   local opts = { n_kv_head = 2, window = 3 }

   local function randoms(n, seed)
      local p = ffi.new("float[?]", n)
      for i = 0, n - 1 do
         seed = (seed * 1103515245 + 12345) % 2147483648
         p[i] = seed / 2147483648 - 0.5
      end
      return p
   end

   -- the one-rank module of the full parameters, seeded by name
   local full = lw.nn.CausalSelfAttention.new("a.", c, nh, true, nil, opts)
   local fd = lw.ddp.new(full:parameters(), lw.comm.self(), { mode = "replicated" })
   full:bind(fd, nil)
   local values = {}
   for i, s in ipairs(full:parameters()) do
      local p = fd:param(s.name)
      values[s.name] = randoms(p.numel, 17 * i)
      ffi.copy(p.data, values[s.name], 4 * p.numel)
   end

   -- this rank's shards of the same parameters
   local part = lw.nn.CausalSelfAttention.new("a.", c, nh, true, g, opts)
   local pd = lw.ddp.new(part:parameters(), g.dp_comm, { mode = "replicated" })
   part:bind(pd, nil)
   for _, s in ipairs(part:parameters()) do
      local p = pd:param(s.name)
      if s.tp then
         lw.tp.from_model(values[s.name], s, g.size, g.rank, p.data)
      else
         ffi.copy(p.data, values[s.name], 4 * p.numel)
      end
   end
   expect(part.n_head == nh / g.size and part.n_kv_head == 2 / g.size, "the rank's heads")

   local n = b * t * c
   local x, r = randoms(n, 5), randoms(n, 9)
   local function worst(a, e, count)
      local w = 0
      for i = 0, count - 1 do w = math.max(w, math.abs(a[i] - e[i])) end
      return w
   end
   local y_full, y_part = full:forward(x, b, t), part:forward(x, b, t)
   expect(worst(y_part, y_full, n) <= 1e-5, "the output")
   local dx_full, dx_part = ffi.new("float[?]", n), ffi.new("float[?]", n)
   fd:zero_grad()
   pd:zero_grad()
   full:backward(x, r, dx_full, b, t)
   part:backward(x, r, dx_part, b, t)
   expect(worst(dx_part, dx_full, n) <= 1e-5, "the input gradient")
   for _, s in ipairs(part:parameters()) do
      local got = pd:grad(s.name)
      local want = fd:grad(s.name).data
      if s.tp then
         local slice = ffi.new("float[?]", got.numel)
         lw.tp.slice(want, s, g.size, g.rank, slice)
         want = slice
      end
      expect(worst(got.data, want, got.numel) <= 1e-5, "the gradient of " .. s.name)
   end
   tally.finish("attention_tp_mpi (rank " .. comm.rank .. ")")
end)
