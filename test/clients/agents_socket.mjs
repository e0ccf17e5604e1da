// The OpenAI Agents SDK's WebSocket model (OpenAIResponsesWSModel) through
// the gateway: two runs of one agent on one socket, the second continuing
// the first. Run by socket_test.go with GATEWAY_URL, GATEWAY_API_KEY and
// GATEWAY_RESPONSES_MODEL; prints the runs' outputs and response ids as JSON.
import OpenAI from 'openai';
import { Agent, run, setTracingDisabled } from '@openai/agents';
import { OpenAIResponsesWSModel } from '@openai/agents-openai';

setTracingDisabled(true);
const client = new OpenAI({ apiKey: process.env.GATEWAY_API_KEY, baseURL: `${process.env.GATEWAY_URL}/beta/v1` });
const model = new OpenAIResponsesWSModel(client, process.env.GATEWAY_RESPONSES_MODEL);
const agent = new Agent({ name: 'Assistant', instructions: 'Be brief.', model });
try {
  const first = await run(agent, 'Hello over the socket');
  const second = await run(agent, 'And again', { previousResponseId: first.lastResponseId });
  console.log(JSON.stringify({ first: first.finalOutput, second: second.finalOutput, ids: [first.lastResponseId, second.lastResponseId] }));
} finally {
  await model.close();
}
