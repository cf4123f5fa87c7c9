package org.kappaplus.hive;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.net.InetSocketAddress;
import java.net.Socket;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * The Python slice planner for the life of a query: served by the driver's own Python
 * process when the options name it ({@code plannerAddress} and {@code plannerSecret}, set by
 * kappaplus's {@code jvm_options}: a loopback connection, see
 * {@code kappaplus.connectors.lake.planner_server}), otherwise one long-lived child process
 * of the driver ({@code python -m kappaplus.connectors.lake.plan_service}).
 *
 * <p>One JSON request per line, one JSON answer per line (the connection, or the child's
 * stdin and stdout; the child's stderr, its log, goes to the driver's). An answer is {@code {"ok": value}} or
 * {@code {"error": {"type": ..., "message": ...}}}; an error becomes a
 * {@link PlannerException} whose message starts with the Python error type, so the runtime
 * reports it as the same one-line error the Python source would give.
 */
final class PlannerProcess implements AutoCloseable {
  static final ObjectMapper JSON = new ObjectMapper();
  static final String ADDRESS = "plannerAddress";
  static final String SECRET = "plannerSecret";
  private static final Logger LOG = LoggerFactory.getLogger(PlannerProcess.class);
  private static final int CONNECT_TIMEOUT_MS = 10_000;

  private final Process process;
  private final Socket socket;
  private final BufferedWriter requests;
  private final BufferedReader answers;

  PlannerProcess(String python, Map<String, String> options) {
    Socket connected = options.containsKey(ADDRESS) ? connect(options) : null;
    ObjectNode first = JSON.createObjectNode();
    options.forEach((key, value) -> {
      if (!key.equals(ADDRESS) && !key.equals(SECRET)) {
        first.put(key, value);
      }
    });
    if (connected != null) {
      socket = connected;
      process = null;
      try {
        requests = new BufferedWriter(
            new OutputStreamWriter(socket.getOutputStream(), StandardCharsets.UTF_8));
        answers = new BufferedReader(
            new InputStreamReader(socket.getInputStream(), StandardCharsets.UTF_8));
        requests.write(options.getOrDefault(SECRET, ""));
        requests.write('\n');
      } catch (IOException e) {
        throw new PlannerException("cannot reach the driver's slice planner at "
            + options.get(ADDRESS) + ": " + e.getMessage(), e);
      }
      send(first);
      return;
    }
    socket = null;
    List<String> command = new ArrayList<>();
    command.add(python);
    command.add("-m");
    command.add("kappaplus.connectors.lake.plan_service");
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
    send(first);
  }

  /**
   * A connection to the driver's in-process planner, or null (with a warning) when it cannot
   * be reached: then the planner runs as a child process, which answers the same.
   */
  private static Socket connect(Map<String, String> options) {
    String address = options.get(ADDRESS);
    int colon = address.lastIndexOf(':');
    Socket connection = new Socket();
    try {
      int port = Integer.parseInt(address.substring(colon + 1));
      connection.connect(
          new InetSocketAddress(address.substring(0, colon), port), CONNECT_TIMEOUT_MS);
      connection.setTcpNoDelay(true);
      LOG.info("kappa_hive_jvm: slice planner served by the driver's Python process at {}",
          address);
      return connection;
    } catch (IOException | RuntimeException e) {
      try {
        connection.close();
      } catch (IOException ignored) {
        // nothing was open
      }
      LOG.warn("kappa_hive_jvm: cannot reach the driver's slice planner at {} ({}); "
          + "starting a planner process instead", address, e.toString());
      return null;
    }
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
      throw new PlannerException(what() + " failed: " + e.getMessage(), e);
    }
    if (line == null) {
      throw new PlannerException(
          what() + " ended (status " + exitStatus() + ") during '" + op
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
          "cannot reach " + what() + " (status " + exitStatus() + "): "
              + e.getMessage(), e);
    }
  }

  private String what() {
    return process == null ? "the driver's slice planner" : "the slice planner process";
  }

  private String exitStatus() {
    if (process == null) {
      return socket.isClosed() ? "connection closed" : "connection open";
    }
    return process.isAlive() ? "running" : String.valueOf(process.exitValue());
  }

  @Override
  public synchronized void close() {
    try {
      requests.close();
    } catch (IOException ignored) {
      // the process may be gone already
    }
    if (process == null) {
      try {
        socket.close();  // the driver's planner thread sees the end of its requests
      } catch (IOException ignored) {
        // already closed
      }
      return;
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
