-- cli_models_spec.lua: models files on the command line (app/cli_models.lua): a model that
-- recipes/own_model.lua trains from recipes/models/mistral.lua is sampled, evaluated, exported,
-- laid out and fine-tuned with --models FILE or LWOPT_MODELS, and without them the commands
-- say which file to pass; a bad models file is refused in one line naming it.
local helpers = require("helpers")
local json = require("lwopt.json")
local cli_models = require("lwopt.app.cli_models")

local root = assert(io.popen("pwd")):read("*l")
local lwopt = root .. "/bin/lwopt"
-- as checkpoints record it: its real path
local file = require("lwopt.files").real_path(root .. "/recipes/models/mistral.lua")

-- A file in dir holding text.
local function write(dir, name, text)
   local f = assert(io.open(dir .. "/" .. name, "w"))
   f:write(text)
   f:close()
   return dir .. "/" .. name
end

-- A getenv whose LWOPT_MODELS is value.
local function env(value)
   return function(name) return name == "LWOPT_MODELS" and value or nil end
end

describe("--models and LWOPT_MODELS", function()
   local dir, trained

   setup(function()
      dir = helpers.tempdir()
      local out, status = helpers.sh("cd " .. dir .. " && luajit " .. root
         .. "/recipes/own_model.lua --preset tiny --steps 3 --warmup 1 --eval-max 2 "
         .. "--progress lines --data " .. root .. "/data/kjv.txt --ckpt-dir " .. dir .. "/ck")
      assert.equal(0, status, out)
      trained = out
   end)

   teardown(function() os.execute("rm -rf " .. dir) end)

   it("names the files of LWOPT_MODELS, then of the flags, in order", function()
      assert.same({ "a.lua", "b.lua", "c.lua", "d.lua" }, cli_models.paths({ "ck", "--models",
         "c.lua", "--tokens", "5", "--models=d.lua" }, env("a.lua::b.lua")))
      assert.same({}, cli_models.paths({ "ck" }, env(nil)))
   end)

   it("trains the models file's model, and its next commands load the file", function()
      assert.matches("Mistral 4 layers x 64, 4 heads (1 KV)", trained, 1, true)
      assert.matches("sample " .. dir .. "/ck --models " .. file, trained, 1, true)
      assert.matches("export " .. dir .. "/ck --models " .. file .. " --format hf-llama",
         trained, 1, true)
   end)

   it("samples, evaluates and exports it with --models or LWOPT_MODELS", function()
      -- the sample the training run printed, drawn again
      local out, status = helpers.sh(lwopt .. " sample " .. dir .. "/ck --models " .. file)
      assert.equal(0, status, out)
      local text = out:match("sample:\n(.-)\n*$")
      assert.is_truthy(text and #text > 100, out)
      assert.matches("sample:\n" .. text, trained, 1, true)
      local loss = trained:match("final validation loss (%d+%.%d+)")
      out, status = helpers.sh("LWOPT_MODELS=" .. file .. " " .. lwopt .. " eval " .. dir
         .. "/ck --data " .. root .. "/data/kjv.txt --eval-max 2")
      assert.equal(0, status, out)
      assert.matches("validation loss " .. loss .. " ", out, 1, true)
      -- the entry's format, by default: transformers' LLaMA with Mistral's rotary base
      out, status = helpers.sh(lwopt .. " export " .. dir .. "/ck --models " .. file .. " "
         .. dir .. "/hf")
      assert.equal(0, status, out)
      assert.matches("as hf-llama", out, 1, true)
      local config = json.decode(helpers.slurp(dir .. "/hf/config.json"))
      assert.equal(1e6, config.rope_theta)
      assert.equal(1, config.num_key_value_heads)
      -- the export fine-tunes into the same model, named by the recipe's --models
      out, status = helpers.sh("cd " .. dir .. " && " .. lwopt .. " train --models " .. file
         .. " --arch mistral --preset tiny --steps 1 --warmup 1 --eval-max 1 --sample 0 "
         .. "--init-from hf/model.safetensors --data " .. root .. "/data/kjv.txt --log ft.jsonl")
      assert.equal(0, status, out)
      assert.matches("initialised from hf/model.safetensors: 39 tensors by hf-llama's names",
         out, 1, true)
      -- its log's record names the models file: --config of it loads the file again
      out, status = helpers.sh("cd " .. dir .. " && " .. lwopt .. " train --config ft.jsonl")
      assert.equal(0, status, out)
      assert.matches("Mistral 4 layers x 64", out, 1, true)
      out, status = helpers.sh(lwopt .. " layout --models " .. file .. " --arch mistral "
         .. "--n-layer 2 --n-embd 64 --n-head 8 --stats")
      assert.equal(0, status, out)
      out, status = helpers.sh("echo 'print(lw.models.get(\"mistral\").title)' | " .. lwopt
         .. " repl --models " .. file)
      assert.equal(0, status, out)
      assert.matches("lw> Mistral", out, 1, true)
   end)

   it("says which file to pass when a checkpoint's model is not loaded, once", function()
      local hint = ("checkpoint %s/ck/step-000000003 holds model 'mistral' (registered by %s "
         .. "when it was trained): pass --models %s"):format(dir, file, file)
      for _, command in ipairs({ "sample", "export" }) do
         local out, status = helpers.sh(lwopt .. " " .. command .. " " .. dir .. "/ck"
            .. (command == "export" and " " .. dir .. "/hf2" or ""))
         assert.equal(1, status, out)
         assert.equal("lwopt " .. command .. ": " .. hint .. "\n", out)
      end
      -- nor is the model an --arch of layout without it
      local out, status = helpers.sh(lwopt .. " layout --arch mistral")
      assert.equal(2, status, out)
      assert.matches("--arch mistral is not a model (gpt, llama, nanochat; a models file's: "
         .. "--models FILE)", out, 1, true)
   end)

   it("refuses a bad models file in one line naming it", function()
      local function said(path, value)
         local ok, why = cli_models.load({ "--models", path }, env(value))
         assert.is_nil(ok)
         return why
      end
      assert.equal("models file " .. dir .. "/none.lua does not exist",
         said(dir .. "/none.lua"))
      local syntax = write(dir, "syntax.lua", "local x =\nreturn {\n")
      assert.equal("models file " .. syntax .. " has a syntax error on line 2: unexpected "
         .. "symbol near 'return'", said(syntax))
      local nothing = write(dir, "nothing.lua", "local lw = require('lwopt')\n"
         .. "lw.models.derive('llama', { name = 'quiet' })\n")
      assert.equal("models file " .. nothing .. " registers nothing: it must return an entry "
         .. "(lw.models.derive(...)) or a list of entries, and returned nil", said(nothing))
      local clash = write(dir, "clash.lua", "local lw = require('lwopt')\n"
         .. "return { lw.models.derive('llama', { name = 'fine' }),\n"
         .. "   lw.models.derive('gpt', { name = 'llama' }) }\n")
      assert.equal("models file " .. clash .. ": 'llama' is the name of one of the library's "
         .. "models (gpt, llama, nanochat): give the model another name", said(clash))
      local calls = write(dir, "calls.lua", "local lw = require('lwopt')\n\n"
         .. "lw.models.register(lw.models.derive('gpt', { name = 'own' }))\n")
      assert.equal("models file " .. calls .. " calls lw.models.register (line 3): a models "
         .. "file returns its entries instead, which lw.models.load registers", said(calls))
      local fails = write(dir, "fails.lua", "error('no such part')\n")
      assert.equal("models file " .. fails .. " failed while it ran: " .. fails .. ":1: no "
         .. "such part", said(fails))
      -- from the environment: said so
      assert.equal("models file " .. syntax .. " has a syntax error on line 2: unexpected "
         .. "symbol near 'return' (from LWOPT_MODELS)", said("x", syntax))
      -- a bad file registers none of its models
      assert.has_error(function() require("lwopt.models").get("fine") end)
      -- an entry whose formats name no export format: export says so
      local typo = write(dir, "typo.lua", "local lw = require('lwopt')\n"
         .. "return lw.models.derive('llama', { name = 'mistral', formats = { 'hf-lama' } })\n")
      local out, status = helpers.sh(lwopt .. " export " .. dir .. "/ck " .. dir
         .. "/typo --models " .. typo)
      assert.equal(1, status, out)
      assert.equal("lwopt export: " .. dir .. "/ck/step-000000003 holds a mistral model, whose "
         .. "entry lists the format 'hf-lama', which is not one of lwopt export's (hf-gpt2, "
         .. "nanogpt, hf-llama, nanochat)\n", out)
      -- the command: its name, the message, status 1
      out, status = helpers.sh(lwopt .. " sample " .. dir .. "/ck --models " .. clash)
      assert.equal(1, status, out)
      assert.equal("lwopt sample: models file " .. clash .. ": 'llama' is the name of one of "
         .. "the library's models (gpt, llama, nanochat): give the model another name\n", out)
   end)

   it("loads a file once, and refuses another file's model of the same name", function()
      assert.is_true(cli_models.load({ "--models", file, "--models", file }, env(file)))
      local other = write(dir, "other.lua", "local lw = require('lwopt')\n"
         .. "return lw.models.derive('llama', { name = 'mistral' })\n")
      local ok, why = cli_models.load({ "--models", other }, env(nil))
      assert.is_nil(ok)
      assert.equal("models file " .. other .. ": a model 'mistral' is registered already (by "
         .. file .. ")", why)
      -- a models file may load the one whose model it derives from
      local nested = write(dir, "nested.lua", "local lw = require('lwopt')\n"
         .. "lw.models.load('" .. file .. "')\n"
         .. "return lw.models.derive('mistral', { name = 'swa', defaults = { window = 16 } })\n")
      assert.is_true(cli_models.load({ "--models", nested }, env(nil)))
      local models = require("lwopt.models")
      assert.equal(1e6, models.config("swa", { n_layer = 1, n_embd = 64, n_head = 4 }).rope_base)
      assert.equal(nested, models.get("swa").file)
   end)
end)
