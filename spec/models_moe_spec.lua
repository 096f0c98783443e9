-- models_moe_spec.lua: mixtures of experts whose experts take the model's activation (LLaMA's
-- SwiGLU, nanochat's ReLU^2) against llama_reference.lua's float64 mixture: router softmax,
-- top-k with renormalised weights, the experts and the shared expert, the load-balancing loss.
-- Loss and load-balancing loss within 1e-5 from the same weights, gradients (of the loss plus
-- the load-balancing loss, as backward takes them) against the reference's finite differences.
local lw = require("lwopt")
local bind = require("nn_helpers").bind
local ref = require("llama_reference")
local model_check = require("model_check")

describe("lw.models' llama with a mixture of experts against a float64 reference", function()
   local swiglu = { n_layer = 2, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13,
      seq_len = 6, rope_base = 50, n_expert = 4, topk = 2, expert_hidden = 8, aux_coef = 0.1,
      shared_expert = true }
   local relu2 = { n_layer = 1, n_embd = 16, n_head = 4, n_kv_head = 2, vocab = 13, seq_len = 6,
      rope_base = 50, n_expert = 3, topk = 1, expert_hidden = 12, aux_coef = 0.3,
      activation = "relu2" }
   for name, cfg in pairs({ ["SwiGLU experts, a shared expert"] = swiglu,
      ["ReLU^2 experts, top-1"] = relu2 }) do
      it(("matches its loss and gradients (%s)"):format(name), function()
         local model = lw.models.build("llama", cfg)
         local full = lw.models.config("llama", cfg)
         local d = bind(model)
         local b, t = 2, 6
         local tokens, targets = model_check.batch(b, t, 13)
         local params = model_check.params_of(model, d)
         local function objective()
            local loss, aux = ref(params(), full, tokens, targets, b, t)
            return loss + aux
         end
         local loss = model:forward(tokens, targets, b, t)
         local want, want_aux = ref(params(), full, tokens, targets, b, t)
         assert.near(want, loss, 1e-5)
         assert.is_true(want_aux > 0)
         assert.near(want_aux, model.aux_loss, 1e-5)
         d:zero_grad()
         model:backward(1)
         model_check.gradients(model, d, objective, 4)
         local seen = {}
         for _, s in ipairs(model:parameters()) do seen[s.name] = table.concat(s.shape, "x") end
         -- the experts are the activation's MLPs: SwiGLU's fc holds gate and up rows
         local fc = (cfg.activation == "relu2" and 1 or 2) * cfg.expert_hidden .. "x16"
         assert.equal(fc, seen["h.0.moe.experts.0.fc.weight"])
         assert.equal("16x" .. cfg.expert_hidden, seen["h.0.moe.experts.0.proj.weight"])
      end)
   end
end)
