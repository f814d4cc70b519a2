// createAgent with the sandlot code-execution middleware.
//   cd clients/typescript && npm ci && npm run build
//   SANDLOT_SOCKET=/run/sandlot/sandlot.sock node examples/langchain.mjs
// The model is LangChain's scripted fake so that this runs without an API
// key; pass a real one (e.g. "openai:gpt-4.1") instead.
import { createAgent, AIMessage } from "langchain";
import { fakeModel } from "@langchain/core/testing";
import { Sandlot } from "sandlot";
import { sandlotMiddleware } from "sandlot/langchain";

const sandlot = sandlotMiddleware({
  client: new Sandlot(),
  create: { memory: "1G", idle_timeout_seconds: 600 },
  files: [{ path: "sales.csv", content: "month,amount\njan,120\nfeb,80\nmar,150\n" }],
  onGeneratedFiles: (files) => console.log("generated:", files.map((f) => `${f.path} (${f.size} bytes)`).join(", ")),
});
const model = fakeModel()
  .respondWithTools([{ name: "execute", args: { command: "python3 -c \"import csv; t=sum(int(r['amount']) for r in csv.DictReader(open('sales.csv'))); open('report.md','w').write(f'# Sales\\ntotal: {t}\\n')\" && cat report.md" }, id: "1" }])
  .respond(new AIMessage("The total is 350; see report.md."));

try {
  const agent = createAgent({ model, tools: [], middleware: [sandlot] });
  const result = await agent.invoke({ messages: [{ role: "user", content: "Total the sales and write a report." }] });
  console.log(result.messages.at(-1).content);
  const report = sandlot.manager.generatedFiles().find((f) => f.path.endsWith("report.md"));
  console.log(new TextDecoder().decode(report.content));
} finally {
  await sandlot.manager.close();
}
