-- models_register_spec.lua: a model made of existing parts is its name and its defaults
-- (lw.models.derive), and a recipe registers it from a models file (lw.models.load) and trains
-- it by --arch, the announce line naming it by its title; bad entries are refused by name.
local lw = require("lwopt")
local helpers = require("helpers")

local root = assert(io.popen("pwd")):read("*l")

describe("lw.models.derive and register", function()
   it("derives an entry from a registered model's fields with new defaults", function()
      local mistral = lw.models.derive("llama", { name = "mistral", title = "Mistral",
         defaults = { window = 16, rope_base = 1e6, vocab = 100 } })
      assert.equal("mistral", mistral.name)
      -- llama's export format holds LLaMA, not its variants: a derived entry names its own
      assert.same({}, mistral.formats)
      assert.same({ "hf-llama" }, lw.models.get("llama").formats)
      -- its fields: llama's, three defaults changed, the others llama's (SwiGLU, RMSNorm ...)
      local llama = lw.models.get("llama")
      assert.equal(#llama.fields, #mistral.fields)
      local defaults = {}
      for _, f in ipairs(mistral.fields) do defaults[f[1]] = f[3] end
      assert.equal(16, defaults.window)
      assert.equal(1e6, defaults.rope_base)
      assert.equal("swiglu", defaults.activation)
      assert.equal("rmsnorm", defaults.norm)
      assert.equal("Mistral 2 layers x 64, 4 heads (4 KV), sequence 1024", mistral.describe({
         n_layer = 2, n_embd = 64, n_head = 4, n_kv_head = 4, seq_len = 1024, n_expert = 0 }))
      -- the base model's entry is untouched
      for _, f in ipairs(llama.fields) do
         if f[1] == "window" then assert.equal(0, f[3]) end
      end
   end)

   it("refuses a default for a field the base model lacks, and bad entries", function()
      local ok, err = pcall(lw.models.derive, "llama", { name = "x", defaults = { widht = 3 } })
      assert.is_false(ok)
      assert.matches("'llama' has no field 'widht'", err, 1, true)
      ok, err = pcall(lw.models.derive, "lama", { name = "x" })
      assert.is_false(ok)
      assert.matches("unknown model 'lama' (gpt, llama, nanochat; ", err, 1, true)
      ok, err = pcall(lw.models.register, lw.models.derive("gpt", { name = "gpt" }))
      assert.is_false(ok)
      assert.matches("'gpt' is the name of one of the library's models (gpt, llama, nanochat)",
         err, 1, true)
      ok, err = pcall(lw.models.register, { name = "y", fields = {} })
      assert.is_false(ok)
      assert.matches("entry 'y' has no check function", err, 1, true)
      ok, err = pcall(lw.models.register, { name = "two words" })
      assert.is_false(ok)
      assert.matches("name is a word", err, 1, true)
   end)

   it("says which models file to pass for a recorded model it does not know", function()
      assert.equal("llama", lw.models.recorded("llama", "checkpoint ck/step-1").name)
      local ok, err = pcall(lw.models.recorded, "own", "checkpoint ck/step-1", "/m/own.lua")
      assert.is_false(ok)
      assert.equal("checkpoint ck/step-1 holds model 'own' (registered by /m/own.lua when it "
         .. "was trained): pass --models /m/own.lua", err)
      -- a model registered without a models file: no hint to give
      ok, err = pcall(lw.models.recorded, "own", "params.safetensors")
      assert.is_false(ok)
      assert.equal("params.safetensors holds model 'own', which no models file loaded here "
         .. "registers (the known models: gpt, llama, nanochat): pass --models FILE, the models "
         .. "file that registers it", err)
   end)

   it("trains a model a recipe loads from a models file, by --arch", function()
      local dir = helpers.tempdir()
      -- a models file: LLaMA with a sliding window on every layer and 2 KV heads
      local f = assert(io.open(dir .. "/swa.lua", "w"))
      f:write([[
local lw = require("lwopt")
return lw.models.derive("llama", { name = "swa", title = "Windowed LLaMA",
   defaults = { window = 8, n_kv_head = 2 } })
]])
      f:close()
      -- the recipe loads it, so that training and the commands share one definition
      f = assert(io.open(dir .. "/recipe.lua", "w"))
      f:write(([[
package.path = "%s/lua/?.lua;%s/lua/?/init.lua;%s/build/lua/?.lua;" .. package.path
local lw = require("lwopt")
lw.comm.run(function(...)
   lw.models.load("swa.lua")
   require("lwopt.app.recipe").main({ ... }, nil, arg[0])
end, ...)
]]):format(root, root, root))
      f:close()
      local out, status = helpers.sh("cd " .. dir .. " && luajit recipe.lua --arch swa "
         .. "--preset tiny --steps 3 --eval-max 2 --warmup 1 --progress lines --data "
         .. root .. "/data/kjv.txt --ckpt-dir " .. dir .. "/ck")
      assert.equal(0, status, out)
      assert.matches("Windowed LLaMA 4 layers x 64, 4 heads (2 KV)", out, 1, true)
      assert.matches("step +3/3  loss %d+%.%d+", out)
      -- the next commands load the models file; no export format holds the model, so none
      assert.matches("eval " .. dir .. "/ck --models " .. dir .. "/swa.lua --data", out, 1, true)
      assert.is_nil(out:find(" export ", 1, true))
      local said, st = helpers.sh(root .. "/bin/lwopt export " .. dir .. "/ck " .. dir
         .. "/hf --models " .. dir .. "/swa.lua")
      assert.equal(1, st)
      assert.matches("holds a Windowed LLaMA model, which no export format holds (they hold "
         .. "the models gpt, llama, nanochat)", said, 1, true)
      os.execute("rm -rf " .. dir)
   end)
end)
