-- bench/checkpoint.lua: checkpoint save and load of recipes/gpt_small.lua's small preset at
-- dp 2 (run under mpirun -np 2), against two training steps and the disk's sequential write
-- rate measured with dd in the same run. Best of 3 saves and loads.
-- Usage: mpirun -np 2 -x OPENBLAS_NUM_THREADS=1 bin/lwopt run bench/checkpoint.lua [dir]
local ffi = require("ffi")
local lw = require("lwopt")

lw.comm.run(function()
   local comm = lw.comm.init()
   local dir = arg[1] or "/tmp/lwopt-bench-ckpt"
   local t = 128
   local model = lw.nn.GPT.new{ n_layer = 6, n_embd = 256, n_head = 8, vocab = 256, seq_len = t }
   local ddp = lw.ddp.new(model:parameters(), comm)
   local opt = lw.optim.new(ddp, { lr = 1e-3 })
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return s.role == "norm" and 1 or 0.02 * math.sin(i + k) end)
   end
   model:bind(ddp, nil)
   -- two training steps, for the goal and so the optimizer state is real
   local tokens, targets = ffi.new("int32_t[?]", 8 * t), ffi.new("int32_t[?]", 8 * t)
   for i = 0, 8 * t - 1 do tokens[i], targets[i] = (i * 7) % 256, (i * 13 + 1) % 256 end
   local function train_step()
      ddp:zero_grad()
      model:forward(tokens, targets, 8, t)
      model:backward(1)
      ddp:finish_grad_sync()
      opt:step()
      ddp:finish_param_sync()
   end
   train_step()
   comm:barrier()
   local t0 = lw.now()
   train_step()
   train_step()
   local two_steps = comm:allreduce({ lw.now() - t0 }, "max")[1]

   local best_save, best_load, path = math.huge, math.huge, nil
   for k = 1, 3 do
      comm:barrier()
      t0 = lw.now()
      path = lw.checkpoint.save(dir, { ddp = ddp, opt = opt, step = k, keep = 1 })
      best_save = math.min(best_save, comm:allreduce({ lw.now() - t0 }, "max")[1])
      comm:barrier()
      t0 = lw.now()
      lw.checkpoint.load(path, { ddp = ddp, opt = opt })
      best_load = math.min(best_load, comm:allreduce({ lw.now() - t0 }, "max")[1])
   end
   if comm.rank == 0 then
      local bytes = 0
      local m = lw.checkpoint.read_manifest(path)
      for _, f in ipairs(m.files) do bytes = bytes + f.bytes end
      -- the disk's sequential write rate, fsynced, in the same directory
      local pipe = io.popen("dd if=/dev/zero of=" .. dir .. "/dd.tmp bs=1M count=256 conv=fsync "
         .. "2>&1 | tail -n 1")
      local dd = pipe:read("*a")
      pipe:close()
      os.remove(dir .. "/dd.tmp")
      local rate, unit = dd:match("([%d%.]+) ([GMk]B)/s")
      local scale = ({ GB = 1e9, MB = 1e6, kB = 1e3 })[unit] or 1
      local dd_rate = tonumber(rate) * scale
      print(("checkpoint of the small preset at dp %d: %.1f MB in %d files"):format(comm.size,
         bytes / 1e6, #m.files))
      print(("save %.3f s (%.0f MB/s), load %.3f s; two training steps %.3f s"):format(best_save,
         bytes / best_save / 1e6, best_load, two_steps))
      print(("dd sequential write (256 MiB, fsync): %.0f MB/s"):format(dd_rate / 1e6))
      print(("goals: save / two steps = %.2f (< 1); write rate / dd = %.2f (>= 0.5)"):format(
         best_save / two_steps, bytes / best_save / dd_rate))
      os.execute("rm -rf " .. dir)
   end
end)
