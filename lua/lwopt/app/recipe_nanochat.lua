-- app/recipe_nanochat.lua: --arch nanochat's optimizer groups, as nanochat's setup_optimizer
-- makes them, written as routing rules, and what the learning-rate flags mean for them. nanochat
-- takes four learning rates (matrix_lr, unembedding_lr, embedding_lr, scalar_lr); the recipe's
-- flags give them: --lr the matrices' (Muon), --adamw-lr the LM head's, --embedding-lr the token
-- embedding's (the value embeddings take half of it), --scalar-lr the x0 scalars' (the residual
-- scalars take a hundredth of it). Flags not given take nanochat's values, not the preset's.
local recipe_nanochat = {}

-- nanochat's defaults for the four rates (its setup_optimizer's arguments)
recipe_nanochat.LR = { lr = 0.02, adamw_lr = 0.004, embedding_lr = 0.2, scalar_lr = 0.5 }

-- The learning-rate flags v left to the preset (or not given) set to nanochat's.
function recipe_nanochat.flag_defaults(v)
   for key, value in pairs(recipe_nanochat.LR) do
      if v[key] == nil or v.from_preset[key] then v[key] = value end
   end
end

local function adamw(lr, weight_decay, beta1, beta2)
   return { lr = lr, weight_decay = weight_decay,
      adamw = { beta1 = beta1, beta2 = beta2, eps = 1e-10 } }
end

-- The routing rules of nanochat's groups for a model of width n_embd and the flags v (lr,
-- adamw_lr, embedding_lr, scalar_lr as flag_defaults leaves them). The LM head's and the
-- embeddings' AdamW rates are scaled by (n_embd / 768)^-0.5, as nanochat's (tuned at width 768);
-- the scalars' are not. The matrices (the gates' too) go to Muon at --lr with the run's Muon
-- flags and --weight-decay.
function recipe_nanochat.rules(v, n_embd)
   local scale = (n_embd / 768) ^ -0.5
   return {
      { name = "nanochat's LM head", match = "^lm_head%.weight$", optimizer = "adamw",
        opts = adamw(v.adamw_lr * scale, 0.01, 0.8, 0.96) },
      { name = "nanochat's token embedding", match = "^wte%.weight$", optimizer = "adamw",
        opts = adamw(v.embedding_lr * scale, 0.001, 0.8, 0.995) },
      { name = "nanochat's value embeddings", match = "%.attn%.ve%.weight$", optimizer = "adamw",
        optional = true, opts = adamw(0.5 * v.embedding_lr * scale, 0.01, 0.8, 0.995) },
      { name = "nanochat's residual scalars", match = "^resid_lambdas$", optimizer = "adamw",
        optional = true, opts = adamw(0.01 * v.scalar_lr, 0.05, 0.8, 0.95) },
      { name = "nanochat's x0 scalars", match = "^x0_lambdas$", optimizer = "adamw",
        optional = true, opts = adamw(v.scalar_lr, 0, 0.96, 0.95) },
      -- a module's own choice first (a mixture of experts' router stays off Muon), as the
      -- default rules take it
      { name = "excluded from Muon", optional = true, optimizer = "adamw",
        match = function(s) return s.use_muon == false end },
      { name = "matrix", optimizer = "muon", match = function(s) return #s.shape == 2 end },
      { name = "everything else", optional = true, optimizer = "adamw", match = "." },
   }
end

return recipe_nanochat
