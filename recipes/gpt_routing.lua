-- gpt_routing.lua: gpt_small with its own routing rules (docs/recipes.md): the attention output
-- projections stay on AdamW at a lower learning rate, the other matrices go to Muon, and
-- embeddings and gains to AdamW. Rules are data: ordered, first match wins; a parameter no rule
-- matches stops the run before any work, naming it.
local dir = (arg and arg[0] or ""):match("^(.*)/[^/]*$") or "."
package.path = table.concat({ dir .. "/../lua/?.lua", dir .. "/../lua/?/init.lua",
   dir .. "/../build/lua/?.lua", package.path }, ";")

-- before the library is built, one line that says how to build it, not a traceback
local found, lw = pcall(require, "lwopt")
if not found then
   io.stderr:write(tostring(lw), "\n")
   os.exit(1)
end

local rules = {
   { match = "attn%.proj%.weight$", optimizer = "adamw", opts = { lr = 1e-3, weight_decay = 0.1 } },
   { match = function(spec) return #spec.shape == 2 and spec.role == "matrix" end,
     optimizer = "muon" },
   { match = ".", optimizer = "adamw" },
}

lw.comm.run(function(...)
   require("lwopt.app.recipe").main({ ... }, rules, arg[0])
end, ...)
