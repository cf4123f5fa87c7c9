package org.kappaplus.hive;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;

/**
 * The Python slice planner, run as one long-lived child process of the driver for the life
 * of a query ({@code python -m kappaplus.connectors.hive.plan_service}).
 *
 * <p>One JSON request per line on its stdin, one JSON answer per line on its stdout; its
 * stderr (logs) goes to the driver's. An answer is {@code {"ok": value}} or
 * {@code {"error": {"type": ..., "message": ...}}}; an error becomes a
 * {@link PlannerException} whose message starts with the Python error type, so the runtime
 * reports it as the same one-line error the Python source would give.
 */
final class PlannerProcess implements AutoCloseable {
  static final ObjectMapper JSON = new ObjectMapper();

  private final Process process;
  private final BufferedWriter requests;
  private final BufferedReader answers;

  PlannerProcess(String python, Map<String, String> options) {
    List<String> command = new ArrayList<>();
    command.add(python);
    command.add("-m");
    command.add("kappaplus.connectors.hive.plan_service");
    ProcessBuilder builder = new ProcessBuilder(command);
    builder.redirectError(ProcessBuilder.Redirect.INHERIT);
    try {
      process = builder.start();
    } catch (IOException e) {
      throw new PlannerException(
          "kappaplus.core.errors.ConfigError: cannot start the slice planner with " + python
              + " (option pythonExec): " + e.getMessage(), e);
    }
    requests = new BufferedWriter(
        new OutputStreamWriter(process.getOutputStream(), StandardCharsets.UTF_8));
    answers = new BufferedReader(
        new InputStreamReader(process.getInputStream(), StandardCharsets.UTF_8));
    ObjectNode first = JSON.createObjectNode();
    options.forEach(first::put);
    send(first);
  }

  /** Ask the planner {@code op} with {@code args}; its answer's value. */
  synchronized JsonNode call(String op, ObjectNode args) {
    ObjectNode request = args == null ? JSON.createObjectNode() : args.deepCopy();
    request.put("op", op);
    send(request);
    String line;
    try {
      line = answers.readLine();
    } catch (IOException e) {
      throw new PlannerException("the slice planner process failed: " + e.getMessage(), e);
    }
    if (line == null) {
      throw new PlannerException(
          "the slice planner process exited (status " + exitStatus() + ") during '" + op
              + "'; its error is in the log above", null);
    }
    JsonNode answer;
    try {
      answer = JSON.readTree(line);
    } catch (IOException e) {
      throw new PlannerException("the slice planner answered no JSON: " + line, e);
    }
    if (answer.has("error")) {
      JsonNode error = answer.get("error");
      throw new PlannerException(
          error.path("type").asText("Error") + ": " + error.path("message").asText(), null);
    }
    return answer.get("ok");
  }

  private void send(ObjectNode request) {
    try {
      requests.write(JSON.writeValueAsString(request));
      requests.write('\n');
      requests.flush();
    } catch (IOException e) {
      throw new PlannerException(
          "cannot reach the slice planner process (status " + exitStatus() + "): "
              + e.getMessage(), e);
    }
  }

  private String exitStatus() {
    return process.isAlive() ? "running" : String.valueOf(process.exitValue());
  }

  @Override
  public synchronized void close() {
    try {
      requests.close();
    } catch (IOException ignored) {
      // the process may be gone already
    }
    try {
      if (!process.waitFor(1, java.util.concurrent.TimeUnit.SECONDS)) {
        process.destroy();
      }
    } catch (InterruptedException e) {
      process.destroy();
      Thread.currentThread().interrupt();
    }
  }

  /** A planner error; its message is the one line a user sees. */
  static final class PlannerException extends RuntimeException {
    PlannerException(String message, Throwable cause) {
      super(message, cause);
    }
  }
}
