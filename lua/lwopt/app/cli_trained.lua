-- cli_trained.lua: the runner of the commands that load a trained model (`lwopt sample`,
-- `lwopt eval`: cli_sample.lua, cli_eval.lua): the flags they share, argv parsing with --help,
-- the job's lines on rank 0, the opening line that says which model was read, and one line per
-- error. Reading the model and its data is the library's (lwopt.trained).
local lw = require("lwopt")
local flags = require("lwopt.flags")
local trained = require("lwopt.trained")

local cli_trained = {}

-- The flags of the commands that load a model (lwopt sample, lwopt eval), besides their own.
cli_trained.flags = {
   { "device", "string", "cpu", "where the model runs: cpu, cuda (under mpirun each rank's own "
     .. "GPU) or cuda:N" },
   { "n-head", "int", nil, "attention heads of a bare .safetensors file that does not record "
     .. "them (default: those of the --preset of its layers and width)", min = 1 },
   { "vocab", "int", nil, "token vocabulary of a bare .safetensors file that does not record it "
     .. "(default: 256, bytes, for 256 rows; GPT-2's 50257 for 50304)", min = 1,
     max = 2 ^ 31 - 1 },
   { "topk", "int", nil, "experts per token of a bare .safetensors file of a mixture of experts "
     .. "(default 2)", min = 1 },
   require("lwopt.app.cli_models").FLAG,
}

-- The commands' opening: trained.open with the flags v (device, n_head, vocab, topk) on the
-- job's communicator, its notes to the user, and the line that says which model was read.
function cli_trained.open(v, path, job)
   local t = trained.open(path, { comm = job.comm, device = v.device, n_head = v.n_head,
      vocab = v.vocab, topk = v.topk, note = job.note })
   job.tell(("model: %s%s: %s"):format(t.path, t.step and (", step %d"):format(t.step) or "",
      trained.describe(t)))
   return t
end

-- Runs a command that loads a model (`lwopt sample`, `lwopt eval`): c = { name, usage, flags (a
-- flag list), check (nil, or a function(v) giving a usage error's message or nil), work }.
-- Parses argv against c.flags (a usage error is one line naming the flag, status 2; --help
-- prints the usage and the flags), takes the one path it needs, and runs work(v, path, job) on
-- every rank of the job, job = { comm, say = a line on rank 0's out, tell = a line on rank 0's
-- err, note = the same after "note: " }. Returns the exit status: 0, or 1 after printing the
-- error ("lwopt NAME: message"); under mpirun an error ends the whole job (lw.comm.fail), so
-- that no rank waits for another that failed.
function cli_trained.main(c, argv, out, err)
   local help = ("lwopt %s --help"):format(c.name)
   local function usage_error(message)
      err:write("lwopt: ", message, " (", help, " lists them)\n")
      return 2
   end
   local v, positional = flags.parse(argv, c.flags)
   if v == nil then return usage_error(positional) end
   if v.help then
      out:write(c.usage, "\n", flags.usage(c.flags), "\n")
      return 0
   end
   if #positional == 0 then
      return usage_error(("%s needs a checkpoint directory or a .safetensors file"):format(c.name))
   end
   if #positional > 1 then
      return usage_error(("unexpected argument '%s'"):format(positional[2]))
   end
   local bad = c.check and c.check(v)
   if bad then return usage_error(bad) end
   local comm = lw.comm.init()
   local function on_rank0(stream, prefix)
      return function(text)
         if comm.rank ~= 0 then return end
         stream:write(prefix, text, "\n")
         stream:flush()
      end
   end
   local context = { comm = comm, say = on_rank0(out, ""), tell = on_rank0(err, ""),
                     note = on_rank0(err, "note: ") }
   local ok, why = pcall(c.work, v, positional[1], context)
   if ok then return 0 end
   local message = ("lwopt %s: %s"):format(c.name, tostring(why))
   if comm.size > 1 then lw.comm.fail(message, 1) end
   err:write(message, "\n")
   return 1
end

return cli_trained
