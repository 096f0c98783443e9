-- tp_run.lua: trains a small GPT under tensor parallelism (lw.tp.groups: TP groups of --tp
-- consecutive ranks, the data split over the DP groups) through the library API, and writes from
-- rank 0, every tensor by name as the tp 1 model's (full tensors gathered over the TP group, the
-- vocabulary's padding trimmed): PREFIX.grads (with --grads: the gradients of the first step's
-- forward and backward, before any update; needs whole reduced gradients on every rank: dp 1 at
-- ZeRO-1, or --mode replicated), PREFIX.losses (the step losses and a validation loss) and
-- PREFIX.params (after the steps). Every run starts from the same full parameters (a function of
-- each tensor's name and place in the tp 1 tensor) whatever --tp. Fails when the tensors that
-- should be equal are not bit for bit: replicated ones across the world, TP shards across their
-- DP group. Driven by tp_consistency.lua.
-- Usage: [mpirun -np N] bin/lwopt run tests/lua/tp_run.lua --out PREFIX --tp T [--grads]
--        [--mode M] [--zero Z] [--batch B] [--accum K] [--steps S] [--optimizer adamw|muon]
--        [--tp-mode duplicated|distributed|blockwise] [--split-qkv on|off] [--heads H]
--        [--embd C] [--layers L] [--untied] [--bias] [--save DIR] [--load DIR]
local ffi = require("ffi")
local lw = require("lwopt")
local flags = require("lwopt.flags")

-- The starting value of element k (0-based, in the tp 1 tensor) of tensor `name`.
local function initial(spec, k)
   if spec.role == "norm" then return 1 end
   local h = 0
   for i = 1, #spec.name do h = (h * 31 + spec.name:byte(i)) % 1000003 end
   return 0.05 * math.sin(1.7 * (h % 1009) + 0.37 * k)
end

-- Writes each parameter's starting value: sharded ones drawn as the tp 1 model's tensor, then
-- sliced to this TP rank's shard (the vocabulary's padding rows 0).
local function init(ddp, g)
   for _, spec in ipairs(ddp.specs) do
      ddp:with_param(spec.name, function(p)
         if not spec.tp then
            for k = 0, p.numel - 1 do p.data[k] = initial(spec, k) end
            return
         end
         local n = lw.tp.numel(lw.tp.model_shape(spec))
         local model = ffi.new("float[?]", n)
         for k = 0, n - 1 do model[k] = initial(spec, k) end
         lw.tp.from_model(model, spec, g.size, g.rank, p.data)
      end)
   end
end

-- "name\nbytes\n" .. data for each tensor of a list ({ name, shape, data }), sorted by name.
local function by_name(tensors)
   table.sort(tensors, function(a, b) return a.name < b.name end)
   local parts = {}
   for _, x in ipairs(tensors) do
      local bytes = 4 * lw.tp.numel(x.shape)
      parts[#parts + 1] = ("%s\n%d\n"):format(x.name, bytes) .. ffi.string(x.data, bytes)
   end
   return table.concat(parts)
end

local function write(path, text)
   local f = assert(io.open(path, "wb"))
   f:write(text)
   f:close()
end

-- Raises when a tensor that must be the same on several ranks is not, bit for bit: replicated
-- ones over the world, shards over their DP group. read(name) -> float*.
local function check_identical(ddp, comm, g, read, what)
   local differs = 0
   for _, spec in ipairs(ddp.specs) do
      local mine = ffi.string(read(spec.name), 4 * lw.tp.numel(spec.shape))
      local over = spec.tp and g.dp_comm or comm
      if over:broadcast_string(mine, 0) ~= mine then differs = differs + 1 end
   end
   differs = comm:allreduce({ differs })[1]
   if differs > 0 then error(("%s differ between ranks in %d tensors"):format(what, differs)) end
end

lw.comm.run(function()
   local v = assert(flags.parse(arg, {
      { "out", "string", nil, "output prefix" }, { "tp", "int", 1, "" },
      { "grads", "bool", false, "" }, { "mode", "string", "layerwise", "" },
      { "zero", "int", 1, "" }, { "batch", "int", 2, "" }, { "accum", "int", 1, "" },
      { "steps", "int", 5, "" }, { "optimizer", "string", "adamw", "" },
      { "tp-mode", "string", "duplicated", "" }, { "split-qkv", "string", "on", "" },
      { "heads", "int", 6, "" }, { "embd", "int", 48, "" }, { "layers", "int", 2, "" },
      { "untied", "bool", false, "" }, { "bias", "bool", false, "" },
      { "data", "string", "data/kjv.txt", "" },
      { "save", "string", nil, "checkpoint the run into this directory after its last step" },
      { "load", "string", nil, "start from this checkpoint, at the step after its own" },
   }))
   local comm = lw.comm.init()
   local g = lw.tp.groups(comm, v.tp)
   local t = 16
   local model = lw.nn.GPT.new{ n_layer = v.layers, n_embd = v.embd, n_head = v.heads,
      vocab = 256, seq_len = t, tied = not v.untied, bias = v.bias, tp = g.size > 1 and g }
   local rules = v.optimizer == "adamw" and { { match = ".", optimizer = "adamw" } } or nil
   local specs = lw.route(model:parameters(), rules)
   local ddp = lw.ddp.new(specs, g.dp_comm, { mode = v.mode, zero = v.zero, bucket_size = 8192 })
   -- clip 0.5: clipping on, so the TP-aware gradient norm (each shard and each TP-replicated
   -- tensor counted once) decides how every TP rank scales.
   -- Newton-Schulz in fp32, as the CPU computes it anyway, so tp 1 is a reference within 1e-5.
   -- AdamW's eps 1e-5: AdamW divides by sqrt(v) + eps, so a gradient that is 0 up to rounding
   -- (the attention keys' bias has none: the softmax ignores a shift of a row's scores) would
   -- have its rounding noise, which differs between any two summation orders, turned into
   -- updates of +-lr; 1e-5 is far above that noise (1e-10) and below the real gradients here.
   local opt = lw.optim.new(ddp, { lr = 3e-3, clip = 0.5, adamw = { eps = 1e-5 },
      tp_comm = g.size > 1 and g.comm or nil, muon = { precision = "fp32", tp_mode = v.tp_mode,
      split_qkv = v.split_qkv == "on" } })
   init(ddp, g)
   local data = lw.data.load(v.data, { seq_len = t })
   local run = { comm = comm, dp_comm = g.dp_comm, model = model, ddp = ddp, opt = opt,
      steps = v.steps, data = data, batch = v.batch, seq = t, accum = v.accum, seed = 5,
      base_lr = 3e-3, lr_warmup = 2, eval_every = 0, eval_max = 8, quiet = true }
   model:bind(ddp, lw.train.hooks(run))
   if v.load then
      local m = lw.checkpoint.load(lw.checkpoint.latest(v.load),
         { ddp = ddp, opt = opt, tp = g, comm = comm })
      run.start_step = m.step + 1
   end

   if v.grads then -- the first step's gradients: the global batch's mean over micro-steps
      local tokens, targets = ffi.new("int32_t[?]", v.batch * t), ffi.new("int32_t[?]", v.batch * t)
      ddp:zero_grad()
      run.report_ready = false
      for micro = 0, v.accum - 1 do
         run.report_ready = micro == v.accum - 1 or ddp.zero >= 2
         data:train_batch(tokens, targets, 5, 1, micro, g.dp_rank, g.dp_size, v.batch, t)
         model:forward(tokens, targets, v.batch, t)
         model:backward(1 / v.accum)
         ddp:end_backward()
      end
      ddp:finish_grad_sync()
      check_identical(ddp, comm, g, function(name) return ddp:grad(name).data end, "gradients")
      local grads = {}
      if g.dp_rank == 0 then
         for _, spec in ipairs(ddp.specs) do
            grads[#grads + 1] = { name = spec.name, shape = spec.shape,
               data = ddp:grad(spec.name).data }
         end
      end
      lw.tp.gather_full(ddp, g, grads)
      if comm.rank == 0 then write(v.out .. ".grads", by_name(grads)) end
      ddp:zero_grad()
      run.report_ready = nil
   end

   local records = lw.train.run(run)
   if v.save then
      lw.checkpoint.save(v.save, { ddp = ddp, opt = opt, step = v.steps, tp = g, comm = comm })
   end
   ddp:finish_param_sync()
   local params = ddp:params_on(0)
   check_identical(ddp, comm, g, function(name) return ddp:read_param(name).data end,
      "parameters")
   lw.tp.gather_full(ddp, g, params)
   if comm.rank == 0 then
      local lines = {}
      for _, r in ipairs(records) do lines[#lines + 1] = ("%.9g\n"):format(r.loss) end
      lines[#lines + 1] = ("%.9g\n"):format(records[#records].val_loss)
      write(v.out .. ".losses", table.concat(lines))
      write(v.out .. ".params", by_name(params))
   end
end)
