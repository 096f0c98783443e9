-- bench/optimizer_step.lua: one optimizer step over GPT-2-124M-shaped parameters, under
-- mpirun at any rank count, for the layerwise, legacy and replicated modes. Gradients are set
-- directly (no model), synchronous syncs (nothing to overlap with). Reports the slowest rank's
-- step split into communication and compute, the bytes each rank sends, and an nccl-tests
-- style line per collective. Run through bench/optimizer_step.sh (dp 1, 2, 4).
-- Usage: mpirun -np N bin/lwopt run bench/optimizer_step.lua [--steps 2] [--modes a,b,c]
local lw = require("lwopt")
local flags = require("lwopt.flags")

lw.comm.run(function()
   local v = assert(flags.parse(arg, {
      { "steps", "int", 2, "steps; the last one is measured" },
      { "modes", "string", "layerwise,legacy,replicated", "modes to run" },
      { "n-layer", "int", 12, "GPT-2 layers" },
   }))
   local comm = lw.comm.init()
   local specs = lw.arch.gpt{ n_layer = v.n_layer, n_embd = 768, n_head = 12 }
   local ops = { "reduce_scatter", "allgather", "allreduce", "allgatherv" }
   local bus = { reduce_scatter = 1, allgather = 1, allreduce = 2, allgatherv = 1 }
   local dp = comm.size

   local function max(x) return comm:allreduce({ x }, "max")[1] end

   for mode in v.modes:gmatch("[^,]+") do
      local d = lw.ddp.new(specs, comm, { mode = mode, overlap = false })
      local opt = lw.optim.new(d, { lr = 1e-3 })
      for _, s in ipairs(specs) do d:param(s.name):fill(0.01) end
      local r, wall
      for step = 1, v.steps do
         d:zero_grad()
         for i = #specs, 1, -1 do
            d:grad(specs[i].name):copy(function(k) return math.sin(k + i + step + comm.rank) end)
            d:grad_ready(specs[i].name)
         end
         comm:barrier()
         if step == v.steps then comm:reset_counters() end
         local t0 = lw.now()
         r = opt:step()
         wall = lw.now() - t0
      end
      local counters = comm:counters()
      local bytes = 0
      for _, op in ipairs(ops) do bytes = bytes + counters[op].bytes end
      local row = {
         step = max(wall), comm = max(r.time.grad_sync + r.time.param_sync),
         compute = max(r.time.norm + r.time.muon + r.time.adamw), muon = max(r.time.muon),
         bytes = max(bytes),
      }
      if comm.rank == 0 then
         print(("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.1f |"):format(dp, mode, row.step,
            row.comm, row.compute, row.muon, row.bytes / 1e6))
      end
      for _, op in ipairs(ops) do
         local c = counters[op]
         if c.calls > 0 and dp > 1 then
            local factor = bus[op] * (dp - 1) / dp
            local size = c.bytes / factor -- the buffer size behind the ring volume
            local time = max(c.seconds)
            if comm.rank == 0 then
               io.stderr:write(("# %-10s dp %d %-15s %12d B %5d calls %9.4f s  algbw %6.2f GB/s  "
                  .. "busbw %6.2f GB/s\n"):format(mode, dp, op, size, c.calls, time,
                  size / time / 1e9, size * factor / time / 1e9))
            end
         end
      end
   end
end)
