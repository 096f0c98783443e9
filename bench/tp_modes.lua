-- tp_modes.lua: Muon's tensor-parallel modes at tp 2 on the recipe's small and wide
-- GPT shapes: per step, the bytes each rank sends over the TP group (the model's all-reduces and
-- the optimizer's Muon traffic apart) and over the DP group (the buffers' gradient and parameter
-- syncs), and each rank's Newton-Schulz time (the step's Muon seconds), for duplicated,
-- distributed and blockwise, with the QKV split on. The modes run interleaved, round after
-- round, in one job; each keeps its best round (smallest median Muon time), since this machine's
-- speed moves by tens of percent within minutes. Bytes are the communicators' counters (what a
-- rank hands its collectives: an all-gather's whole result, an all-reduce's whole buffer).
-- Usage: mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 bin/lwopt run bench/tp_modes.lua
--        [--presets small,wide] [--steps N] [--rounds R] [--batch B] [--seq T]   (np: 2 x dp)
local ffi = require("ffi")
local lw = require("lwopt")
local flags = require("lwopt.flags")

local v = assert(flags.parse(arg, {
   { "presets", "string", "small,wide", "" }, { "steps", "int", 4, "" },
   { "rounds", "int", 3, "" }, { "batch", "int", 4, "" }, { "seq", "int", 128, "" },
}))
local SHAPES = { small = { n_layer = 6, n_embd = 256, n_head = 8 },
                 wide = { n_layer = 6, n_embd = 1024, n_head = 16 } }
local MODES = { "duplicated", "distributed", "blockwise" }

local comm = lw.comm.init()
local g = lw.tp.groups(comm, 2)

local median = dofile((arg[0]:match("^(.*)/[^/]*$") or ".") .. "/recipe_runs.lua").median

local function bytes_of(c)
   local total = 0
   for _, op in pairs(c:counters()) do total = total + op.bytes end
   return total
end

-- One run of `steps` steps of preset's GPT at tp 2 with Muon in `mode`: per step (medians over
-- the steps after the first) { tp_model, tp_muon, dp bytes, muon seconds } on this rank.
local function run(preset, mode)
   local s = SHAPES[preset]
   local model = lw.nn.GPT.new{ n_layer = s.n_layer, n_embd = s.n_embd, n_head = s.n_head,
      vocab = 256, seq_len = v.seq, tied = true, tp = g }
   local ddp = lw.ddp.new(lw.route(model:parameters()), g.dp_comm)
   local opt = lw.optim.new(ddp, { lr = 1e-3, tp_comm = g.comm,
      muon = { tp_mode = mode, precision = "fp32" } })
   for _, spec in ipairs(ddp.specs) do -- small values: the timing does not depend on them
      ddp:with_param(spec.name, function(p)
         for i = 0, p.numel - 1 do p.data[i] = 0.02 * math.sin(i * 0.37 + #spec.name) end
      end)
   end
   model:bind(ddp, ddp:hooks())
   local n = v.batch * v.seq
   local tokens, targets = ffi.new("int32_t[?]", n), ffi.new("int32_t[?]", n)
   local out = { tp_model = {}, tp_muon = {}, dp = {}, muon = {} }
   for step = 1, v.steps do
      for i = 0, n - 1 do -- the same tokens on both TP ranks of a replica
         tokens[i] = (i * 7 + step * 13 + g.dp_rank * 5) % 256
         targets[i] = (i * 11 + step) % 256
      end
      g.comm:reset_counters()
      g.dp_comm:reset_counters()
      ddp:zero_grad()
      model:forward(tokens, targets, v.batch, v.seq)
      model:backward(1)
      ddp:end_backward()
      ddp:finish_grad_sync()
      local before = bytes_of(g.comm)
      local r = opt:step()
      ddp:finish_param_sync()
      if step > 1 then
         out.tp_model[#out.tp_model + 1] = before
         out.tp_muon[#out.tp_muon + 1] = bytes_of(g.comm) - before
         out.dp[#out.dp + 1] = bytes_of(g.dp_comm)
         out.muon[#out.muon + 1] = r.time.muon
      end
   end
   return { tp_model = median(out.tp_model), tp_muon = median(out.tp_muon), dp = median(out.dp),
      muon = median(out.muon) }
end

local function list(s)
   local out = {}
   for x in s:gmatch("[^,]+") do out[#out + 1] = x end
   return out
end

local best = {}
for round = 1, v.rounds do
   for _, preset in ipairs(list(v.presets)) do
      -- each round starts at another mode, so no mode always runs first
      for k = 0, #MODES - 1 do
         local mode = MODES[(k + round - 1) % #MODES + 1]
         local key = preset .. "/" .. mode
         local r = run(preset, mode)
         -- every rank's Muon seconds, in rank order
         local mine = {}
         for i = 1, comm.size do mine[i] = i - 1 == comm.rank and r.muon or 0 end
         r.muon_by_rank = comm:allreduce(mine)
         local slowest = math.max(unpack(r.muon_by_rank))
         if best[key] == nil or slowest < best[key].slowest then
            r.slowest = slowest
            best[key] = r
         end
      end
   end
end

if comm.rank == 0 then
   print(("tp 2 x dp %d, %d ranks, batch %d x %d per replica, %d steps (medians of steps 2..), "
      .. "best of %d rounds; Newton-Schulz fp32, QKV split on"):format(g.dp_size, comm.size,
      v.batch, v.seq, v.steps, v.rounds))
   print("| preset | mode | TP bytes/step: model | TP bytes/step: Muon | DP bytes/step | "
      .. "Muon s/step by rank |")
   print("|---|---|---:|---:|---:|---|")
   for _, preset in ipairs(list(v.presets)) do
      for _, mode in ipairs(MODES) do
         local r = best[preset .. "/" .. mode]
         local ranks = {}
         for i, x in ipairs(r.muon_by_rank) do ranks[i] = ("%.4f"):format(x) end
         print(("| %s | %s | %.2f MB | %.2f MB | %.2f MB | %s |"):format(preset, mode,
            r.tp_model / 1e6, r.tp_muon / 1e6, r.dp / 1e6, table.concat(ranks, ", ")))
      end
   end
end
