-- export_helpers.lua: shared by the export specs (llama_names, nanochat_names, the --init-from
-- ones): running the command line, a checkpoint of a model of lw.models to export, a
-- safetensors file's tensors by name, a trained model's loss over its real vocabulary and the
-- check that --init-from wrote a checkpoint's weights bit for bit.
local ffi = require("ffi")
local assert = require("luassert")
local lw = require("lwopt")
local cli = require("lwopt.app.cli")
local weights = require("lwopt.weights")
local helpers = require("helpers")

local export_helpers = {}

-- Runs `lwopt argv...` in this process; returns its status, stdout and stderr.
function export_helpers.run(argv)
   local out, err = helpers.sink(), helpers.sink()
   local status = cli.main(argv, out, err)
   return status, out.text(), err.text()
end

-- A checkpoint at dir of lw.models' arch model of cfg (its config), element k of parameter i
-- amp sin(1.3 i + 0.07 k) + offset (every value different), saved at step 1 with the settings
-- extra. Returns its step directory.
function export_helpers.checkpoint(dir, arch, cfg, extra, amp, offset)
   local model = lw.models.build(arch, cfg)
   local ddp = lw.ddp.new(model:parameters(), lw.comm.self())
   for i, s in ipairs(model:parameters()) do
      ddp:param(s.name):copy(function(k) return amp * math.sin(1.3 * i + 0.07 * k) + offset end)
   end
   return lw.checkpoint.save(dir, { ddp = ddp, step = 1, opt = lw.optim.new(ddp, { lr = 1e-2 }),
      extra = extra })
end

-- name -> { shape, data (float*) } of a safetensors file (lwopt's weights reader), and the
-- names in the file's order.
function export_helpers.tensors_of(path)
   local f = weights.open(path, path)
   local out = {}
   for _, name in ipairs(f.order) do
      out[name] = { shape = f.shapes[name], data = weights.read(f, name) }
   end
   return out, f.order
end

-- The mean loss of a trained model (lwopt.trained's) on n fixed tokens, its softmax over the
-- first vocab rows only: an export leaves lwopt's padding rows out, and they are never targets.
function export_helpers.loss_of(t, vocab, n)
   local tokens = ffi.new("int32_t[?]", n)
   for i = 0, n - 1 do tokens[i] = (i * 13 + 5) % vocab end
   t.model:forward(tokens, nil, 1, n)
   local loss = 0
   for r = 0, n - 1 do
      local p, sum = t.model:next_probs(r), 0
      for j = 0, vocab - 1 do sum = sum + p[j] end
      loss = loss - math.log(p[(r * 7 + 3) % vocab] / sum)
   end
   return loss / n
end

-- Every parameter of model (in ddp) equals the checkpoint's tensors ours bit for bit, except
-- the rows from `from` on of the parameters padded(name) names, which the file did not hold
-- and must be zero.
function export_helpers.same_weights(model, ddp, ours, padded, from)
   for _, s in ipairs(model:parameters()) do
      local o = ours[s.name]
      local cut = padded(s.name)
      ddp:with_param(s.name, function(t)
         for k = 0, t.numel - 1 do
            local row = math.floor(k / (o.shape[2] or 1))
            local want = cut and row >= from and 0 or o.data[k]
            assert.equal(want, t.data[k], s.name)
         end
      end)
   end
end

return export_helpers
