// A Deep Agent whose execute and file tools work in a sandlot sandbox.
//   cd clients/typescript && npm ci && npm run build
//   SANDLOT_SOCKET=/run/sandlot/sandlot.sock node examples/deepagents.mjs
// The model is LangChain's scripted fake so that this runs without an API
// key; pass a real chat model (e.g. "anthropic:claude-sonnet-4-5") instead.
import { createDeepAgent } from "deepagents";
import { fakeModel } from "@langchain/core/testing";
import { AIMessage } from "@langchain/core/messages";
import { Sandlot } from "sandlot";
import { SandlotBackend } from "sandlot/deepagents";

const backend = await SandlotBackend.create({ client: new Sandlot(), create: { memory: "1G", ttl_seconds: 3600 } });
const model = fakeModel()
  .respondWithTools([{ name: "write_file", args: { file_path: "/home/user/data.csv", content: "city,temp\nOslo,4\nRome,17\n" }, id: "1" }])
  .respondWithTools([{ name: "execute", args: { command: "python3 -c \"import csv; r=list(csv.DictReader(open('data.csv'))); print(max(r, key=lambda x: int(x['temp']))['city'])\"" }, id: "2" }])
  .respondWithTools([{ name: "grep", args: { pattern: "Rome", path: "/home/user" }, id: "3" }])
  .respond(new AIMessage("Rome is the warmest."));

try {
  const agent = createDeepAgent({ model, backend });
  const result = await agent.invoke({ messages: [{ role: "user", content: "Which city is warmest?" }] });
  for (const m of result.messages.filter((m) => m.type === "tool")) console.log(`${m.name}: ${m.content}`);
  console.log(result.messages.at(-1).content);
} finally {
  await backend.close();
}
