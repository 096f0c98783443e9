-- train_run.lua: trains the tiny GPT for a few steps through the library API and writes, from
-- rank 0, the per-step losses (one per line) and the final parameters (raw f32, in spec order).
-- Fails if the parameters differ by a single bit between ranks. Driven by train_consistency.lua.
-- Usage: [mpirun -np N] bin/lwopt run tests/lua/train_run.lua --out PREFIX [--mode M]
--        [--overlap on|off] [--batch B] [--accum K] [--steps S] [--optimizer muon|adamw]
--        [--zero 1|2|3] [--shard aligned|rows] [--layout A] [--bucket N] [--layers L]
--        [--experts E] (every MLP a mixture of E experts, top-2, a shared expert)
--        [--arch gpt|llama] (the registry's model of that name, lw.models: llama's experts
--        are SwiGLU MLPs)
--        [--param-dtype fp32|bf16] (bf16: fp32 master weights in the optimizer)
--        [--grad-dtype fp32|bf16] (what the gradient sums move)
--        [--ep P] (expert parallelism over groups of P ranks, lw.ep.groups; with --ep, of any P,
--        the parameters are written by name, sorted, every expert gathered to rank 0, and the
--        expert parameters are compared bit for bit within each expert-DP group only)
-- Also writes PREFIX.memory: rank 0's lw_buffers_memory figures, the padded model's bytes, and
-- a block's bytes as the layout gives them (layoutblock).
local ffi = require("ffi")
local lw = require("lwopt")
local flags = require("lwopt.flags")

lw.comm.run(function()
   local v = assert(flags.parse(arg, {
      { "out", "string", nil, "output prefix" }, { "mode", "string", "layerwise", "" },
      { "overlap", "string", "on", "" }, { "batch", "int", 2, "" }, { "accum", "int", 1, "" },
      { "steps", "int", 5, "" }, { "optimizer", "string", "muon", "" },
      { "data", "string", "data/kjv.txt", "" }, { "zero", "int", 1, "" },
      { "shard", "string", "aligned", "" }, { "layout", "string", nil, "" },
      { "bucket", "int", 8192, "" }, { "layers", "int", 2, "" },
      { "experts", "int", 0, "" }, { "ep", "int", 0, "" },
      { "param-dtype", "string", "fp32", "" }, { "grad-dtype", "string", "fp32", "" },
      { "arch", "string", "gpt", "" },
   }))
   local comm = lw.comm.init()
   local g = v.ep > 0 and lw.ep.groups(comm, v.ep, v.experts) or nil
   local t = 16
   local model = lw.models.build(v.arch, { n_layer = v.layers, n_embd = 32, n_head = 4,
      vocab = 256, seq_len = t, n_expert = v.experts, topk = 2, aux_coef = 0.05,
      shared_expert = v.experts > 0 }, { ep = g and g.size > 1 and g or nil })
   local rules = v.optimizer == "adamw" and { { match = ".", optimizer = "adamw" } } or nil
   local specs = lw.route(model:parameters(), rules)
   local ddp = lw.ddp.new(specs, comm, { mode = v.mode, bucket_size = v.bucket,
      overlap = v.overlap == "on", zero = v.zero, shard = v.shard, algorithm = v.layout,
      expert_comm = g and g.expert_comm, param_dtype = v.param_dtype,
      grad_dtype = v.grad_dtype })
   local opt = lw.optim.new(ddp, { lr = 3e-3, clip = 1.0 })
   -- with --ep, each tensor's values follow from its name (its index differs between ep values)
   local function seed(i, name)
      if not g then return i end
      local h = 0
      for b = 1, #name do h = (h * 31 + name:byte(b)) % 1000003 end
      return h % 1009
   end
   for i, s in ipairs(specs) do
      i = seed(i, s.name)
      ddp:with_param(s.name, function(p)
         p:copy(function(k) return s.role == "norm" and 1 or 0.05 * math.sin(1.7 * i + 0.37 * k) end)
      end)
   end
   local run = { comm = comm, model = model, ddp = ddp, opt = opt, steps = v.steps,
      data = lw.data.load(v.data, { seq_len = t }), batch = v.batch, seq = t, accum = v.accum,
      seed = 5, base_lr = 3e-3, lr_warmup = 2, eval_every = 0, eval_max = 8, quiet = true }
   model:bind(ddp, lw.train.hooks(run))
   local gathers0 = ddp:memory().gathers
   local records = lw.train.run(run)
   local gathers = ddp:memory().gathers - gathers0
   ddp:finish_param_sync()
   -- bit-identical on every rank (expert parameters with --ep: on every rank of the expert-DP
   -- group, the ranks holding the same experts)
   local differs, final, named, mine_experts = 0, {}, {}, {}
   for _, s in ipairs(specs) do
      ddp:with_param(s.name, function(p)
         local mine = ffi.string(p.data, 4 * p.numel)
         local over = (g and s.expert) and g.expert_comm or comm
         if over:broadcast_string(mine, 0) ~= mine then differs = differs + 1 end
         final[#final + 1] = mine
         named[s.name] = mine
         if s.expert and g and g.group == 0 then
            mine_experts[#mine_experts + 1] = ("%s\n%d\n"):format(s.name, #mine) .. mine
         end
      end)
   end
   if g then -- every expert to rank 0, then all parameters by name
      local packed = table.concat(mine_experts)
      for root = 0, comm.size - 1 do
         local got = comm:broadcast_string(packed, root)
         local at = 1
         while at <= #got do
            local name, len, body = got:match("^([^\n]*)\n(%d+)\n()", at)
            named[name] = got:sub(body, body + tonumber(len) - 1)
            at = body + tonumber(len)
         end
      end
      local names = {}
      for name in pairs(named) do names[#names + 1] = name end
      table.sort(names)
      final = {}
      for i, name in ipairs(names) do final[i] = named[name] end
   end
   differs = comm:allreduce({ differs })[1]
   if differs > 0 then error(("parameters differ between ranks in %d tensors"):format(differs)) end
   if comm.rank == 0 then
      local f = assert(io.open(v.out .. ".losses", "w"))
      for _, r in ipairs(records) do f:write(("%.9g\n"):format(r.loss)) end
      f:write(("%.9g\n"):format(records[#records].val_loss))
      f:close()
      f = assert(io.open(v.out .. ".params", "wb"))
      f:write(table.concat(final))
      f:close()
      local m = ddp:memory()
      local padded, block = 0, 0
      for _, b in ipairs(ddp.layout.buffers) do
         padded = padded + b.numel
         -- a block: the buffer's largest bucket and the largest shard a reduce-scatter leaves
         -- any rank (equal shards: that bucket's; packed: any bucket's largest)
         local largest, shard = 0, 0
         for _, k in ipairs(b.buckets) do
            largest = math.max(largest, k.stop - k.start)
            shard = math.max(shard, k.shard_size)
         end
         block = math.max(block, 4 * (largest + shard))
      end
      f = assert(io.open(v.out .. ".memory", "w"))
      f:write(("peak %d\narrays %d\nbudget %d\nblock %d\nover %d\nflushes %d\nmodel %d\n"
         .. "gathers %d\ngroups %d\nlayoutblock %d\n"):format(m.peak, m.arrays, m.budget,
         m.block_bytes, m.over_budget, m.flushes, 2 * 4 * padded, gathers, ddp:num_groups(),
         block))
      f:close()
   end
end)
