-- attention_tp_mpi.lua: nn.CausalSelfAttention with grouped KV heads and a window under tensor
-- parallelism, under mpirun (ctest: 2 ranks, the world one TP group): 8 heads of 4 channels
-- reading 2 KV heads (one per rank), window 3, each rank's shards cut from the same full
-- parameters by their specs (lw.tp.from_model: the unequal Q, K and V blocks). Against a
-- one-rank module of the full parameters, within 1e-5 (the all-reduces sum the heads'
-- contributions in another order: ~1e-7 apart): the output, the input gradient, each rank's
-- parameter gradients (the same slices of the full ones), and the parameters after an optimizer
-- step (Muon's QKV split of the unequal blocks under TP, AdamW on the biases). A checkpoint of
-- that step saved at tp 2 and loaded into fresh shards gives the same parameters and, after a
-- second step from the same gradients, the same parameters again (the optimizer state put back
-- through the manifest's block sizes). All of it again with nanochat's value embeddings (a table
-- split by its KV heads' columns, a gate by their rows; the gate's input gradient joining qkv's
-- all-reduce). Prints "N passed, M failed"; exits non-zero on a failure.
local ffi = require("ffi")
local lw = require("lwopt")
local tally = dofile("tests/lua/tally.lua")
local expect = tally.expect

lw.comm.run(function()
   local comm = lw.comm.init()
   local g = lw.tp.groups(comm, comm.size)
   local c, nh, b, t = 32, 8, 2, 7

   local function randoms(n, seed)
      local p = ffi.new("float[?]", n)
      for i = 0, n - 1 do
         seed = (seed * 1103515245 + 12345) % 2147483648
         p[i] = seed / 2147483648 - 0.5
      end
      return p
   end

   -- the tokens the value embeddings look up (host memory: the CPU's kernels read it)
   local vocab = 11
   local tokens = ffi.new("int32_t[?]", b * t)
   for i = 0, b * t - 1 do tokens[i] = (i * 5 + 2) % vocab end

   local function case(opts, what)
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
      expect(part.n_head == nh / g.size and part.n_kv_head == 2 / g.size,
         "the rank's heads" .. what)
      full.tokens, part.tokens = tokens, tokens

      local n = b * t * c
      local x, r = randoms(n, 5), randoms(n, 9)
      local function worst(a, e, count)
         local w = 0
         for i = 0, count - 1 do w = math.max(w, math.abs(a[i] - e[i])) end
         return w
      end
      local y_full, y_part = full:forward(x, b, t), part:forward(x, b, t)
      expect(worst(y_part, y_full, n) <= 1e-5, "the output" .. what)
      local dx_full, dx_part = ffi.new("float[?]", n), ffi.new("float[?]", n)
      fd:zero_grad()
      pd:zero_grad()
      full:backward(x, r, dx_full, b, t)
      part:backward(x, r, dx_part, b, t)
      expect(worst(dx_part, dx_full, n) <= 1e-5, "the input gradient" .. what)
      for _, s in ipairs(part:parameters()) do
         local got = pd:grad(s.name)
         local want = fd:grad(s.name).data
         if s.tp then
            local slice = ffi.new("float[?]", got.numel)
            lw.tp.slice(want, s, g.size, g.rank, slice)
            want = slice
         end
         expect(worst(got.data, want, got.numel) <= 1e-5, "the gradient of " .. s.name .. what)
      end

      -- one optimizer step on each side: the shards must stay the full parameters' slices
      local options = { lr = 1e-2, muon = { precision = "fp32" } }
      local opt_full = lw.optim.new(fd, options)
      options.tp_comm = g.comm
      local opt_part = lw.optim.new(pd, options)
      opt_full:step()
      fd:finish_param_sync()
      opt_part:step()
      pd:finish_param_sync()
      local function same_as_full(d, what)
         for _, s in ipairs(part:parameters()) do
            local got, want = d:param(s.name), fd:param(s.name).data
            if s.tp then
               local slice = ffi.new("float[?]", got.numel)
               lw.tp.slice(want, s, g.size, g.rank, slice)
               want = slice
            end
            expect(worst(got.data, want, got.numel) <= 1e-5, what .. ": " .. s.name)
         end
      end
      same_as_full(pd, "after a step" .. what)

      -- the step's checkpoint at tp 2, loaded into fresh shards
      local dir = comm:broadcast_string(os.tmpname() .. "-attention-tp" .. what, 0)
      lw.checkpoint.save(dir, { ddp = pd, opt = opt_part, step = 1, tp = g, comm = comm })
      local again = lw.nn.CausalSelfAttention.new("a.", c, nh, true, g, opts)
      again.tokens = tokens
      local ad = lw.ddp.new(again:parameters(), g.dp_comm, { mode = "replicated" })
      again:bind(ad, nil)
      local opt_again = lw.optim.new(ad, options)
      lw.checkpoint.load(lw.checkpoint.latest(dir), { ddp = ad, opt = opt_again, tp = g,
         comm = comm })
      for _, s in ipairs(part:parameters()) do
         expect(worst(ad:param(s.name).data, pd:param(s.name).data, ad:param(s.name).numel) == 0,
            "loaded: " .. s.name .. what)
      end
      -- a second step from the same gradients on both: the same state gives the same parameters
      for _, m in ipairs({ { part, pd, opt_part }, { again, ad, opt_again } }) do
         local module, d, opt = m[1], m[2], m[3]
         module:forward(x, b, t)
         d:zero_grad()
         module:backward(x, r, nil, b, t)
         opt:step()
         d:finish_param_sync()
      end
      for _, s in ipairs(part:parameters()) do
         expect(worst(ad:param(s.name).data, pd:param(s.name).data, ad:param(s.name).numel) == 0,
            "a step after loading: " .. s.name .. what)
      end
      comm:barrier()
      if comm.rank == 0 then os.execute("rm -rf '" .. dir .. "'") end
   end

   case({ n_kv_head = 2, window = 3 }, "")
   case({ n_kv_head = 2, window = 3, value_embed = { vocab = vocab, channels = 12 } },
      " (value embeddings)")
   tally.finish("attention_tp_mpi (rank " .. comm.rank .. ")")
end)
