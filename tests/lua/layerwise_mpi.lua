-- layerwise_mpi.lua: through the Lua API, under mpirun (ctest runs it at 1, 2 and 3 ranks):
-- layer-wise Muon + AdamW (every shard-aligned algorithm and packed, buckets, overlap on and off) and
-- legacy give the same parameters as replicated data parallelism within 1e-5 after 3 steps,
-- bit-identical on every rank. Prints "N passed, M failed" and exits non-zero on a failure.
local lw = require("lwopt")

lw.comm.run(function()
   local comm = lw.comm.init()
   local specs = lw.arch.gpt{ n_layer = 2, n_embd = 32, n_head = 2, vocab = 64, seq_len = 16 }
   local passed, failed = 0, 0

   local function train(opts)
      local d = lw.ddp.new(specs, comm, opts)
      local opt = lw.optim.new(d, { lr = 0.01, clip = 5.0 })
      for i, s in ipairs(specs) do
         d:param(s.name):copy(function(k) return 0.05 * math.sin(0.3 * i + 0.01 * k) end)
      end
      for step = 1, 3 do
         for g = 1, d:num_groups() do d:finish_param_sync(g) end -- forward pre-hooks
         d:zero_grad()
         for i = #specs, 1, -1 do -- backward
            local name = specs[i].name
            d:grad(name):copy(function(k)
               return math.cos(0.2 * i + 0.05 * k + step) + 0.1 * (comm.rank - (comm.size - 1) / 2)
            end)
            d:grad_ready(name)
         end
         opt:step(step == 2 and 0.5 or 1)
      end
      d:finish_param_sync()
      return d
   end

   local function same_on_every_rank(d)
      local differs = 0
      for _, s in ipairs(specs) do
         local mine = d:param(s.name)
         local text = table.concat(mine:totable(), ",")
         if comm:broadcast_string(text, 0) ~= text then differs = differs + 1 end
      end
      return comm:allreduce({ differs })[1] == 0
   end

   local reference = train({ mode = "replicated" })
   local cases = {
      { mode = "legacy" },
      { mode = "legacy", bucket_size = 3000, overlap = false },
   }
   for _, algorithm in ipairs({ "cost", "lpt", "size_matching", "packed" }) do
      for _, bucket in ipairs({ false, 3000 }) do
         for _, overlap in ipairs({ true, false }) do
            cases[#cases + 1] = { algorithm = algorithm, bucket_size = bucket or nil,
                                  overlap = overlap }
         end
      end
   end
   cases[#cases + 1] = { algorithm = "cost", adamw_layout = "aligned", bucket_size = 3000 }
   cases[#cases + 1] = { algorithm = "packed", adamw_layout = "aligned", bucket_size = 3000 }
   for _, case in ipairs(cases) do
      local d = train(case)
      local worst = 0
      for _, s in ipairs(specs) do
         worst = math.max(worst, d:param(s.name):max_abs_diff(reference:param(s.name)))
      end
      worst = comm:allreduce({ worst }, "max")[1]
      local ok = worst <= 1e-5 and same_on_every_rank(d)
      if ok then passed = passed + 1 else
         failed = failed + 1
         if comm.rank == 0 then
            io.stderr:write(("case %s/%s bucket %s overlap %s: max diff %g\n"):format(
               case.mode or "layerwise", tostring(case.algorithm), tostring(case.bucket_size),
               tostring(case.overlap), worst))
         end
      end
   end
   if comm.rank == 0 then
      print(("layerwise_mpi at %d ranks: %d passed, %d failed"):format(comm.size, passed, failed))
   end
   if failed > 0 then os.exit(1) end
end)
