package local.ticdcdelta;

import io.debezium.engine.ChangeEvent;
import io.debezium.engine.DebeziumEngine;
import io.debezium.engine.format.Json;

import java.io.FileInputStream;
import java.io.InputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Runs Debezium's embedded engine with the connector configured in a properties file and writes
 * every event it delivers, in delivery order, into one Kafka topic with a plain producer: key and
 * value as Debezium's JSON converter writes them ({"schema", "payload"}), a delete's tombstone as a
 * null value, schema changes (the connector's schema-change topic) into the same topic.
 *
 * Usage: java -cp 'jars/*' local.ticdcdelta.DebeziumCapture capture.properties
 * Properties starting with "capture." are this program's: capture.bootstrap.servers (the
 * broker), capture.topic (the topic, which must exist). The others configure the engine.
 * For each event it prints "delivered <destination> <partition>@<offset>" once the broker has it;
 * it runs until SIGTERM, then stops the engine and the producer.
 */
public final class DebeziumCapture {
    private DebeziumCapture() {
    }

    private static byte[] bytes(String text) {
        return text == null ? null : text.getBytes(StandardCharsets.UTF_8);
    }

    public static void main(String[] args) throws Exception {
        Properties all = new Properties();
        try (InputStream in = new FileInputStream(args[0])) {
            all.load(in);
        }
        Properties engineProps = new Properties();
        Properties producerProps = new Properties();
        for (String name : all.stringPropertyNames()) {
            if (!name.startsWith("capture.")) {
                engineProps.setProperty(name, all.getProperty(name));
            }
        }
        String topic = all.getProperty("capture.topic");
        producerProps.setProperty(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, all.getProperty("capture.bootstrap.servers"));
        producerProps.setProperty(ProducerConfig.ACKS_CONFIG, "all");
        producerProps.setProperty(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, "true");
        producerProps.setProperty(ProducerConfig.MAX_IN_FLIGHT_REQUESTS_PER_CONNECTION, "1");
        KafkaProducer<byte[], byte[]> producer =
                new KafkaProducer<>(producerProps, new ByteArraySerializer(), new ByteArraySerializer());

        CountDownLatch finished = new CountDownLatch(1);
        DebeziumEngine<ChangeEvent<String, String>> engine = DebeziumEngine.create(Json.class)
                .using(engineProps)
                .notifying((records, committer) -> {
                    List<Future<RecordMetadata>> sent = new ArrayList<>();
                    for (ChangeEvent<String, String> record : records) {
                        sent.add(producer.send(new ProducerRecord<>(topic, 0, bytes(record.key()), bytes(record.value()))));
                    }
                    producer.flush();
                    for (int i = 0; i < records.size(); i++) {
                        RecordMetadata written;
                        try {
                            written = sent.get(i).get();
                        } catch (java.util.concurrent.ExecutionException e) {
                            throw new RuntimeException("the broker refused an event", e.getCause());
                        }
                        System.out.println("delivered " + records.get(i).destination() + " "
                                + written.partition() + "@" + written.offset());
                        committer.markProcessed(records.get(i));
                    }
                    System.out.flush();
                    committer.markBatchFinished();
                })
                .using((success, message, error) -> {
                    System.out.println("engine stopped: " + (success ? "ok" : "failed") + ": " + message);
                    if (error != null) {
                        error.printStackTrace(System.out);
                    }
                    System.out.flush();
                    finished.countDown();
                })
                .build();

        ExecutorService executor = Executors.newSingleThreadExecutor();
        AtomicBoolean stopping = new AtomicBoolean();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            stopping.set(true);
            try {
                engine.close();
                finished.await(30, TimeUnit.SECONDS);
                executor.shutdown();
                executor.awaitTermination(30, TimeUnit.SECONDS);
            } catch (Exception e) {
                e.printStackTrace(System.out);
            } finally {
                producer.close();
            }
        }));
        executor.execute(engine);
        finished.await();
        if (!stopping.get()) {
            // The engine stopped on its own (an error): exit non-zero so the caller sees it.
            System.exit(3);
        }
    }
}
