// A ToolLoopAgent whose tools run in a sandlot sandbox.
//   cd clients/typescript && npm ci && npm run build
//   SANDLOT_SOCKET=/run/sandlot/sandlot.sock node examples/ai-sdk.mjs
// The model here is the AI SDK's mock, scripted to call the tools, so the
// example runs without an API key; put a real one in its place
// (e.g. `openai("gpt-4.1")` from @ai-sdk/openai).
import { ToolLoopAgent, tool } from "ai";
import { MockLanguageModelV4 } from "ai/test";
import { z } from "zod";
import { Sandlot } from "sandlot";
import { SandlotSandboxSession } from "sandlot/ai-sdk";

const client = new Sandlot();
const session = await SandlotSandboxSession.create(client, { memory: "512M", ttl_seconds: 600 });

const usage = { inputTokens: { total: 0, noCache: 0, cacheRead: 0, cacheWrite: 0 }, outputTokens: { total: 0, text: 0, reasoning: 0 } };
const call = (id, toolName, input) => ({ type: "tool-call", toolCallId: id, toolName, input: JSON.stringify(input) });
const script = [
  [call("1", "writeFile", { path: "fib.py", content: "a, b = 0, 1\nfor _ in range(20): a, b = b, a + b\nprint(a)\n" })],
  [call("2", "bash", { command: "python3 fib.py | tee answer.txt" })],
  [call("3", "readFile", { path: "answer.txt" })],
  [{ type: "text", text: "fib(20) = 6765" }],
];
const model = new MockLanguageModelV4({
  doGenerate: async () => {
    const content = script.shift();
    return { content, finishReason: { unified: content[0].type === "text" ? "stop" : "tool-calls", raw: undefined }, usage, warnings: [] };
  },
});

// Tools reach the sandbox through `experimental_sandbox` in their options.
const agent = new ToolLoopAgent({
  model,
  instructions: session.description,
  tools: {
    bash: tool({
      description: "Run a shell command in the sandbox",
      inputSchema: z.object({ command: z.string() }),
      execute: ({ command }, { experimental_sandbox: sb, abortSignal }) => sb.run({ command, abortSignal }),
    }),
    writeFile: tool({
      description: "Write a file in the sandbox",
      inputSchema: z.object({ path: z.string(), content: z.string() }),
      execute: async ({ path, content }, { experimental_sandbox: sb }) => {
        await sb.writeTextFile({ path, content });
        return "written";
      },
    }),
    readFile: tool({
      description: "Read a file from the sandbox (null if missing)",
      inputSchema: z.object({ path: z.string() }),
      execute: ({ path }, { experimental_sandbox: sb }) => sb.readTextFile({ path }),
    }),
  },
});

try {
  const result = await agent.generate({ prompt: "What is the 20th Fibonacci number?", experimental_sandbox: session });
  for (const step of result.steps) for (const r of step.toolResults) console.log(r.toolName, JSON.stringify(r.output));
  console.log(result.text);
} finally {
  await session.sandbox.delete();
  client.close();
}
