-- models/gpt.lua: the registry's entry for GPT-2's architecture (nn/gpt.lua: learned positions,
-- LayerNorm, a GELU MLP or a mixture of experts, multi-head attention, a tied or untied head).
local GPT = require("lwopt.nn.gpt")

return {
   name = "gpt",
   title = "GPT", -- how run reports name it
   -- lwopt export's formats that hold it, the default first (export.lua, gpt_names.lua)
   formats = { "hf-gpt2", "nanogpt" },
   fields = GPT.fields,
   check = GPT.check,
   -- run: { tp, ep } groups, or none
   build = function(c, run)
      local cfg = {}
      for k, v in pairs(c) do cfg[k] = v end
      cfg.tp, cfg.ep = run.tp or false, run.ep or false
      return GPT.new(cfg)
   end,
   describe = function(c)
      return ("GPT %d layers x %d, %d heads, sequence %d%s"):format(c.n_layer, c.n_embd,
         c.n_head, c.seq_len, c.n_expert > 0 and (", %d experts, top-%d"):format(c.n_expert,
         c.topk) or "")
   end,
}
